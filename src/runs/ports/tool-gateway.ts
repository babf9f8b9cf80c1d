import type { ToolDefinition } from '../engines/types.js'
import type { Redactor } from '../../secrets/redact.js'

/** The agent runtime's tool gateway as the worker needs it (src/runtime/gateway.ts). */
export interface ToolGatewayPort {
  definitions(): ToolDefinition[]
  /** the built-in tools and the org's MCP servers' tools that answer now */
  definitionsFor(orgId: string): Promise<ToolDefinition[]>
  /** the tools the org's policy denies: never offered to its runs, never executed */
  deniedTools(orgId: string): Promise<Set<string>>
  execute(input: {
    orgId: string
    runId: string
    rootRunId: string
    callId: string
    name: string
    arguments: string
    signal: AbortSignal
    /** the run's secrets, as the environment of its sandbox commands */
    env?: Record<string, string> | undefined
    /** what the gateway stores, streams and answers goes through it (the run's secret values redacted) */
    redact?: Redactor | undefined
    /** a call that needs no decision answers `deferred`, unexecuted */
    defer?: boolean | undefined
    /** the call's approval, asked before the run left its worker */
    approvalId?: string | undefined
    /** the model round that asked for the call: its start and end are stored under it and the call's id */
    round?: number | undefined
  }): Promise<{ content: string; status: string; approvalId: string | null }>
  /** drops the run's waiting approvals (every instance sees it) and stops its running calls here */
  cancelRun(orgId: string, runId: string): Promise<number>
  /**
   * writes files into the thread's workspace inside its confinement; false without a sandbox; `signal` stops a wait for
   * the workspace
   */
  putFiles(
    ref: { orgId: string; runId: string; rootRunId: string },
    files: Array<{ path: string; data: Buffer }>,
    signal?: AbortSignal
  ): Promise<boolean>
  /**
   * Ends the run's hold on its thread's workspace, saving what it changed so the thread's
   * next run or terminal finds it on any instance; the error the run ends with when that
   * failed (`workspace_too_large: …`), else null. Never throws.
   */
  settleWorkspace(orgId: string, runId: string): Promise<string | null>
}
