import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { conflict, validationFailed } from '../../plugins/errors.js'
import type { Config } from '../config.js'
import { newId } from '../db/ids.js'
import { guardUrl, providerFetcher, type ProviderFetch } from '../providers/address-guard.js'
import type { InternalSecrets } from '../secrets/service.js'
import { MCP_TOOL_PREFIX } from '../../schemas/mcp.js'
import { callTool, connectionError, listTools, type McpTarget } from './client.js'
import {
  allMcpServers,
  deleteMcpServer,
  getMcpServer,
  headerSecretName,
  insertMcpServer,
  mcpServerNamed,
  recordConnection,
  type McpServerRow
} from './servers-repo.js'
import type { ListedTool } from './tables.js'

/** An OpenAI `tools` entry, as the gateway offers it to a model. */
export interface McpToolDefinition {
  type: 'function'
  function: { name: string; description: string; parameters: Record<string, unknown> }
}

/** What the tool gateway asks of the org's MCP servers (src/runtime/gateway.ts). */
export interface McpTools {
  /** whether a name is an MCP tool's (`mcp__<server>__<tool>`), whichever org */
  isMcpTool(name: string): boolean
  /** the tools of the org's reachable servers, listed now; an unreachable server offers none */
  definitions(orgId: string): Promise<McpToolDefinition[]>
  /** calls one tool on its server; `ok` false when the server said it failed or could not be reached */
  call(
    orgId: string,
    name: string,
    args: Record<string, unknown>,
    signal: AbortSignal
  ): Promise<{ ok: boolean; content: string }>
  /** the tools the org's servers listed when last reached, as stored (no connection is made) */
  known(orgId: string): Promise<Array<{ name: string; description: string }>>
}

/** The MCP group's instance-wide side, as `app.mcp`. */
export interface McpService {
  create(
    orgId: string,
    input: { name: string; url: string; headers?: Record<string, string> | undefined },
    createdBy: string | null
  ): Promise<McpServerRow>
  check(orgId: string, id: string): Promise<McpServerRow | null>
  remove(orgId: string, id: string): Promise<boolean>
  /**
   * The index of the first `mcp__` name in `names` that no server of the org offers, or -1. A
   * server that has not listed its tools yet (never reached) is taken to offer any name.
   */
  unknownTool(orgId: string, names: string[]): Promise<number>
  forGateway: McpTools
}

declare module 'fastify' {
  interface FastifyInstance {
    mcp: McpService
  }
}

export interface McpServiceOptions {
  config: Config
  /** where header values are sealed (the secrets group's internal secrets) */
  secrets: InternalSecrets
}

/** What OpenAI (and so every engine) accepts as a function name. */
const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/

/** A server URL as stored: http(s), no credentials or fragment; or the 400 saying what is wrong. */
export function normalizeServerUrl(raw: string): string {
  const refuse = (message: string) => validationFailed([{ path: '/body/url', message }])
  let url: URL
  try {
    url = new URL(raw.trim())
  } catch {
    throw refuse('must be an absolute http(s) URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw refuse('must be an http or https URL')
  if (url.username !== '' || url.password !== '') throw refuse('must not carry credentials; send them as headers')
  if (url.hash !== '') throw refuse('must not have a fragment')
  if (url.hostname === '') throw refuse('must name a host')
  return url.href
}

/** Cairn as an MCP client: the org's servers, their sealed headers, and their tools for runs. */
export default fp(
  async function mcpService(app: FastifyInstance, opts: McpServiceOptions) {
    const { config, secrets } = opts
    const db = app.db
    const allowPrivate = config.PROVIDER_ALLOW_PRIVATE
    const fetcher = providerFetcher(allowPrivate)
    const fetch: ProviderFetch = fetcher.fetch
    const listTimeoutMs = config.MCP_TIMEOUT_MS
    const callTimeoutMs = config.MCP_CALL_TIMEOUT_MS

    /** 400 naming /body/url when the host resolves to an address MCP servers may not use. */
    const guard = (url: string) => guardUrl(url, allowPrivate, '/body/url', 'MCP servers')

    /** The server's URL and its headers, opened; null when a header cannot be opened. */
    async function targetOf(row: McpServerRow): Promise<McpTarget | string> {
      const headers: Record<string, string> = {}
      for (const name of row.headerNames) {
        const value = await secrets.open(row.orgId, headerSecretName(row.id, name))
        if (value === null)
          return `the header ${name} cannot be opened on this server (was SECRETS_KEY changed?); delete the server and add it again`
        headers[name] = value
      }
      return { url: row.url, headers }
    }

    /** Connects and lists the tools, and records the outcome when it changed what the row says. */
    async function connect(row: McpServerRow, always: boolean): Promise<McpServerRow> {
      const target = await targetOf(row)
      let outcome: { ok: true; tools: ListedTool[] } | { ok: false; error: string }
      if (typeof target === 'string') outcome = { ok: false, error: target }
      else {
        try {
          outcome = { ok: true, tools: await listTools(fetch, target, listTimeoutMs) }
        } catch (err) {
          outcome = { ok: false, error: connectionError(err) }
        }
      }
      const same = outcome.ok
        ? row.ready && JSON.stringify(row.tools) === JSON.stringify(outcome.tools)
        : !row.ready && row.lastError === outcome.error
      if (same && !always) return row
      return (await recordConnection(db, row.orgId, row.id, outcome)) ?? row
    }

    /** The server a tool name belongs to (the longest server name it starts with) and the tool's own name. */
    function splitName(servers: McpServerRow[], name: string): { server: McpServerRow; tool: string } | null {
      let best: { server: McpServerRow; tool: string } | null = null
      for (const server of servers) {
        const prefix = `${MCP_TOOL_PREFIX}${server.name}__`
        if (
          name.startsWith(prefix) &&
          name.length > prefix.length &&
          (!best || server.name.length > best.server.name.length)
        ) {
          best = { server, tool: name.slice(prefix.length) }
        }
      }
      return best
    }

    const forGateway: McpTools = {
      isMcpTool: (name) => name.startsWith(MCP_TOOL_PREFIX),
      async definitions(orgId) {
        const servers = await allMcpServers(db, orgId)
        if (servers.length === 0) return []
        // listed now, every server at once: one that does not answer in time offers nothing
        const connected = await Promise.all(
          servers.map((row) =>
            connect(row, false).catch((err: unknown) => {
              app.log.warn({ err, server: row.id }, 'mcp: recording a connection failed')
              return { ...row, ready: false }
            })
          )
        )
        return connected
          .filter((row) => row.ready)
          .flatMap((row) =>
            row.tools
              .map((tool) => ({
                type: 'function' as const,
                function: {
                  name: `${MCP_TOOL_PREFIX}${row.name}__${tool.name}`,
                  description: tool.description ?? `the ${tool.name} tool of the MCP server ${row.name}`,
                  parameters: tool.inputSchema
                }
              }))
              .filter((d) => FUNCTION_NAME.test(d.function.name))
          )
      },
      async known(orgId) {
        return (await allMcpServers(db, orgId))
          .flatMap((row) =>
            row.tools.map((tool) => ({
              name: `${MCP_TOOL_PREFIX}${row.name}__${tool.name}`,
              description: tool.description ?? `the ${tool.name} tool of the MCP server ${row.name}`
            }))
          )
          .filter((tool) => FUNCTION_NAME.test(tool.name))
      },
      async call(orgId, name, args, signal) {
        const found = splitName(await allMcpServers(db, orgId), name)
        if (!found)
          return { ok: false, content: `error: no MCP server of this organization offers ${JSON.stringify(name)}` }
        const target = await targetOf(found.server)
        if (typeof target === 'string') return { ok: false, content: `error: ${target}` }
        try {
          return await callTool(fetch, target, found.tool, args, signal, callTimeoutMs)
        } catch (err) {
          if (signal.aborted) return { ok: false, content: 'the run was cancelled' }
          return { ok: false, content: `error: the MCP server ${found.server.name} failed: ${connectionError(err)}` }
        }
      }
    }

    const service: McpService = {
      async create(orgId, input, createdBy) {
        const url = normalizeServerUrl(input.url)
        await guard(url)
        if (await mcpServerNamed(db, orgId, input.name))
          throw conflict(`this organization already has an MCP server named ${JSON.stringify(input.name)}`)
        const id = newId()
        const headers = Object.entries(input.headers ?? {})
        const lower = headers.map(([name]) => name.toLowerCase())
        const twice = lower.findIndex((name, i) => lower.indexOf(name) !== i)
        if (twice >= 0)
          throw validationFailed([
            {
              path: `/body/headers/${headers[twice]![0]}`,
              message: 'the same header twice (names are case-insensitive)'
            }
          ])
        // the values first: a server row never exists without its headers
        for (const [name, value] of headers) await secrets.put(orgId, headerSecretName(id, name), value)
        const forget = () =>
          secrets.remove(
            orgId,
            headers.map(([name]) => headerSecretName(id, name))
          )
        const row = await insertMcpServer(db, orgId, {
          id,
          name: input.name,
          url,
          headerNames: headers.map(([name]) => name),
          createdBy
        }).catch(async (err: unknown) => {
          await forget()
          throw err
        })
        if (!row) {
          await forget()
          throw conflict(`this organization already has an MCP server named ${JSON.stringify(input.name)}`)
        }
        // checked once at once, so a server that works offers its tools from the next run on
        return connect(row, true)
      },
      async check(orgId, id) {
        const row = await getMcpServer(db, orgId, id)
        return row ? connect(row, true) : null
      },
      async remove(orgId, id) {
        const row = await deleteMcpServer(db, orgId, id)
        if (!row) return false
        if (row.headerNames.length > 0)
          await secrets.remove(
            orgId,
            row.headerNames.map((name) => headerSecretName(id, name))
          )
        return true
      },
      async unknownTool(orgId, names) {
        const servers = await allMcpServers(db, orgId)
        return names.findIndex((name) => {
          if (!name.startsWith(MCP_TOOL_PREFIX)) return false
          const found = splitName(servers, name)
          if (!found) return true
          return found.server.tools.length > 0 && !found.server.tools.some((t) => t.name === found.tool)
        })
      },
      forGateway
    }
    app.decorate('mcp', service)
    app.addHook('onClose', async () => {
      await app.shutdown.close("the MCP servers' connections", () => fetcher.close())
    })
  },
  { name: 'mcp', fastify: '5.x', dependencies: ['db', 'secrets'] }
)
