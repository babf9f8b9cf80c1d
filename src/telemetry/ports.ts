// The ports a run goes through, observed: src/app.ts hands the runs group these instead of
// the bare ports, so neither side knows about telemetry. Every other member of a port is
// its own, bound to it.
import type { Db } from '../db/client.js'
import type { RunMemory } from '../runs/ports/memory.js'
import type { ToolGatewayPort } from '../runs/ports/tool-gateway.js'
import type { McpToolSource } from '../runtime/ports.js'
import { observeMcpCall, observeRecall, observeToolCall } from './genai.js'

/** `target` with some members replaced; the others read from it, functions bound to it. */
function overriding<T extends object>(target: T, overrides: Partial<T>): T {
  return new Proxy(target, {
    get(object, property) {
      if (Object.hasOwn(overrides, property)) return overrides[property as keyof T]
      const value: unknown = Reflect.get(object, property, object)
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(object) : value
    }
  })
}

/** The tool gateway as runs use it, each call an `execute_tool` span and counted (src/telemetry/genai.ts). */
export function observedToolGateway<T extends ToolGatewayPort>(gateway: T, db: Db): T {
  return overriding(gateway, {
    execute: (input) => observeToolCall(db, input, () => gateway.execute(input))
  } as Partial<T>)
}

/** An org's MCP servers as the gateway calls them, each call a `tools/call` span. */
export function observedMcp<T extends McpToolSource>(mcp: T): T {
  return overriding(mcp, {
    call: (orgId, name, args, signal) => observeMcpCall(name, () => mcp.call(orgId, name, args, signal))
  } as Partial<T>)
}

/** The Memory Hub as runs use it, each recall a `retrieval` span. */
export function observedMemory<T extends RunMemory>(memory: T): T {
  return overriding(memory, {
    recall: (run, text, options) => observeRecall(options.kind, () => memory.recall(run, text, options))
  } as Partial<T>)
}
