import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { conflict, validationFailed } from '../../plugins/errors.js'
import type { Config } from '../config.js'
import { newId } from '../db/ids.js'
import { guardUrl, providerFetcher, typedHttpUrl, type ProviderFetch } from '../providers/address-guard.js'
import type { InternalSecrets } from '../secrets/service.js'
import { MCP_TOOL_PREFIX } from '../../schemas/mcp.js'
import {
  backoffDelay,
  createWorkerLoop,
  systemClock,
  type Clock,
  type LoopTimers,
  type WorkerLoop
} from '../worker-loop.js'
import { callTool, connectionError, listTools, type McpTarget } from './client.js'
import {
  allMcpServers,
  claimDueCheck,
  deleteMcpServer,
  FUNCTION_NAME,
  getMcpServer,
  headerSecretName,
  insertMcpServer,
  mcpServerNamed,
  nextCheckDue,
  recordConnection,
  runToolName,
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
  /**
   * the tools of the org's servers that answer, listed now, all at once, within MCP_TIMEOUT_MS in
   * all; a server known to be down is not asked (it offers none until the background check reaches it)
   */
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
  /** the background check of the servers that failed (every instance runs one; a due server is checked by one) */
  checker: WorkerLoop<McpServerRow>
}

declare module 'fastify' {
  interface FastifyInstance {
    mcp: McpService
  }
}

/** The variables the MCP service reads: a read of another is a type error. */
export type McpConfig = Pick<Config, 'PROVIDER_ALLOW_PRIVATE' | 'MCP_TIMEOUT_MS' | 'MCP_CALL_TIMEOUT_MS'>

export interface McpServiceOptions {
  config: McpConfig
  /** where header values are sealed (the secrets group's internal secrets) */
  secrets: InternalSecrets
  /** the time failures and checks are dated by (a test's clock) */
  clock?: Clock
  /** the background check's waits (a test's timers) */
  timers?: LoopTimers
}

/** a failed server is tried again after about this long, doubling each failure in a row ... */
export const RECHECK_BASE_MS = 10_000
/** ... up to this */
export const RECHECK_MAX_MS = 10 * 60_000
/** how often the background check looks for due servers when nothing told it of one (another instance's failures) */
const RECHECK_POLL_MS = 30_000

/**
 * Why a server name is refused beyond its pattern, or null. A run's tool name
 * `mcp__<server>__<tool>` must say which server it is: with no `__` in the name and no `_`
 * at its end, the first `__` after the prefix ends the server's name, so two servers never
 * yield the same tool name (`a__b` + `c` and `a` + `b__c`; `a_` + `b` and `a` + `_b`).
 */
export function serverNameProblem(name: string): string | null {
  if (name.includes('__')) return 'must not contain __ (it separates the server from the tool in mcp__<server>__<tool>)'
  if (name.endsWith('_')) return 'must not end with _ (mcp__<server>__<tool> would not say where the name ends)'
  return null
}

/** A server URL as stored: http(s), no credentials or fragment; or the 400 saying what is wrong. */
export function normalizeServerUrl(raw: string): string {
  return typedHttpUrl(raw, { path: '/body/url', credentialsGo: 'send them as headers', query: true }).href
}

/** Cairn as an MCP client: the org's servers, their sealed headers, and their tools for runs. */
export default fp(
  async function mcpService(app: FastifyInstance, opts: McpServiceOptions) {
    const { config, secrets } = opts
    const clock = opts.clock ?? systemClock
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

    /**
     * Connects and lists the tools (until `cut`, if given, aborts), and records the outcome when
     * it changed what the row says (a failure always: it sets when the server is tried again).
     */
    async function connect(row: McpServerRow, always: boolean, cut?: AbortSignal): Promise<McpServerRow> {
      const target = await targetOf(row)
      let outcome: { ok: true; tools: ListedTool[] } | { ok: false; error: string }
      if (typeof target === 'string') outcome = { ok: false, error: target }
      else {
        try {
          outcome = { ok: true, tools: await listTools(fetch, target, listTimeoutMs, cut) }
        } catch (err) {
          const late = cut?.aborted || (err as Error)?.name === 'TimeoutError' || /timed out/i.test(String(err))
          outcome = {
            ok: false,
            error: late ? `the server did not list its tools within ${listTimeoutMs} ms` : connectionError(err)
          }
        }
      }
      if (outcome.ok) {
        const same =
          row.ready && row.nextCheckAt === null && JSON.stringify(row.tools) === JSON.stringify(outcome.tools)
        if (same && !always) return row
        return (await recordConnection(db, row.orgId, row.id, outcome, clock.now())) ?? row
      }
      const failures = row.failures + 1
      const now = clock.now()
      const retryAt = new Date(now.getTime() + backoffDelay(failures, RECHECK_BASE_MS, RECHECK_MAX_MS))
      const recorded = await recordConnection(db, row.orgId, row.id, { ...outcome, failures, retryAt }, now)
      // the background check learns when it is due
      checker.wake()
      return recorded ?? { ...row, ready: false, lastError: outcome.error, failures, nextCheckAt: retryAt }
    }

    /** The tools a server offers runs: the names a model API accepts, each once. */
    function offeredTools(row: McpServerRow): McpToolDefinition[] {
      const seen = new Set<string>()
      const out: McpToolDefinition[] = []
      for (const tool of row.tools) {
        const name = runToolName(row.name, tool.name)
        if (!FUNCTION_NAME.test(name) || seen.has(name)) continue
        seen.add(name)
        out.push({
          type: 'function',
          function: {
            name,
            description: tool.description ?? `the ${tool.name} tool of the MCP server ${row.name}`,
            parameters: tool.inputSchema
          }
        })
      }
      return out
    }

    // the background check: a due server (one that failed) is connected to again; each failure
    // in a row waits longer (RECHECK_BASE_MS doubling up to RECHECK_MAX_MS), a success makes it
    // offer its tools to the next run start
    const leaseMs = listTimeoutMs + 60_000
    const checker: WorkerLoop<McpServerRow> = createWorkerLoop<McpServerRow>({
      name: 'mcp checks',
      log: app.log,
      concurrency: 4,
      pollMs: RECHECK_POLL_MS,
      backoff: { baseMs: 1000, maxMs: RECHECK_POLL_MS },
      ...(opts.timers ? { timers: opts.timers } : {}),
      claim: () => {
        const now = clock.now()
        return claimDueCheck(db, now, new Date(now.getTime() + leaseMs))
      },
      async work(row) {
        await connect(row, true)
      },
      async idleMs() {
        const due = await nextCheckDue(db)
        if (!due) return RECHECK_POLL_MS
        // (at least a second: a due server another instance is checking is skipped, not spun on)
        return Math.min(RECHECK_POLL_MS, Math.max(1000, due.getTime() - clock.now().getTime()))
      },
      drain: 'finish'
    })

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
        // a server known to be down is not asked: the background check tries it again
        const servers = (await allMcpServers(db, orgId)).filter((row) => row.nextCheckAt === null)
        if (servers.length === 0) return []
        // every server at once under one deadline: one that has not answered by then offers
        // nothing to this run (its listing is cut, and recorded as failed, in the background)
        const deadline = new AbortController()
        const timer = setTimeout(() => deadline.abort(), listTimeoutMs)
        const late = new Promise<null>((resolve) =>
          deadline.signal.addEventListener('abort', () => resolve(null), { once: true })
        )
        try {
          const listed = await Promise.all(
            servers.map((row) => {
              const listing = connect(row, false, deadline.signal).catch((err: unknown) => {
                app.log.warn({ err, server: row.id }, 'mcp: recording a connection failed')
                return null
              })
              checker.track(listing)
              return Promise.race([listing, late])
            })
          )
          return listed.filter((row): row is McpServerRow => row !== null && row.ready).flatMap(offeredTools)
        } finally {
          clearTimeout(timer)
        }
      },
      async known(orgId) {
        return (await allMcpServers(db, orgId))
          .flatMap(offeredTools)
          .map((d) => ({ name: d.function.name, description: d.function.description }))
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
        const problem = serverNameProblem(input.name)
        if (problem) throw validationFailed([{ path: '/body/name', message: problem }])
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
      forGateway,
      checker
    }
    app.decorate('mcp', service)
    app.addHook('onReady', async () => {
      checker.start()
    })
    app.addHook('preClose', async () => {
      await app.shutdown.drain("the MCP servers' checks", (ms) => checker.stop(ms))
    })
    app.addHook('onClose', async () => {
      await app.shutdown.close("the MCP servers' connections", () => fetcher.close())
    })
  },
  { name: 'mcp', fastify: '5.x', dependencies: ['db', 'secrets', 'shutdown-refusals'] }
)
