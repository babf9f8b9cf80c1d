import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import type { Server } from '@modelcontextprotocol/sdk/server/index.js'
import {
  ErrorCode,
  isInitializeRequest,
  isJSONRPCRequest,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCRequest,
  type MessageExtraInfo
} from '@modelcontextprotocol/sdk/types.js'
import { sql } from 'drizzle-orm'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { notFound } from '../../plugins/errors.js'
import { idempotentWork } from '../../plugins/idempotency/index.js'
import { errorResponses, IdParams } from '../../schemas/common.js'
import {
  CreateMcpServerBody,
  mcpErrorAnswers,
  ListMcpServersQuery,
  McpAnswer,
  McpHeaders,
  McpMessage,
  McpServerEnvelope,
  McpServerPage,
  McpStream
} from '../../schemas/mcp.js'
import { principalOf, realUserId, type Principal } from '../auth/principal.js'
import { rowsOf } from '../db/client.js'
import { boolOf } from '../db/rows.js'
import { newId } from '../db/ids.js'
import { buildMcpServer, callerAuth, type McpCaller } from './server.js'
import { RequestTransport } from './request-transport.js'
import { listMcpServers, mcpServerToWire } from './servers-repo.js'
import { mcpSessions } from './tables.js'

const TAGS = ['mcp']
const ADMIN = { scope: 'admin' } as const
/** the headers of a request the MCP transport reads; the rest (cookies, keys) stay here */
const FORWARDED = ['accept', 'content-type', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id'] as const
/** a session's last use is written at most this often */
const TOUCH_EVERY_S = 300
/** at most this many idle servers are kept (about the requests one instance serves at once) */
const IDLE_SERVERS = 32

/** Who a session belongs to: the same caller (user, key or dev org) in the same org, or no one. */
const holderOf = (p: Principal) => `${p.kind}:${p.kind === 'key' ? (p.keyId ?? '') : (p.userId ?? '')}`

/** What an instance's memo knows of a session row. */
interface KnownSession {
  orgId: string
  holder: string
  /** the row's last_used_at as last written or read, in ms */
  usedAt: number
}

/**
 * The session rows an instance has seen, by database handle, so that a session's requests
 * do not each read its row. A row the memo does not know is read and then known; the memo
 * answers "live" only well inside the idle limit (near it the row decides) and for the
 * same caller. Ending a session removes its row and tells every instance (NOTIFY on
 * `SESSION_ENDED`), and each forgets it when it hears that: the instance that ended it at
 * once, the others within the notice's delay. An instance whose listener reconnects forgets
 * everything (notices are not replayed). On the embedded database every instance runs in
 * one process (its data directory is locked to one) and shares the handle, and so the memo.
 */
const knownSessions = new WeakMap<object, { sessions: Map<string, KnownSession>; generation: number }>()
/** the channel on which an ended session's id is announced */
const SESSION_ENDED = 'cairn_mcp_session_ended'
/** how close to the idle limit the memo stops answering alone (clock and write delays) */
const MEMO_MARGIN_MS = 60_000

/** A JSON-RPC error answered before the transport (an unknown session, a missing one). */
function rpcError(reply: FastifyReply, status: number, code: number, message: string) {
  return reply
    .code(status)
    .type('application/json')
    .send(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }))
}

/** Passes a server stream through after an SSE comment that opens it. */
const openedStream = () =>
  new TransformStream<Uint8Array, Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(': stream open\n\n'))
    }
  })

/** An `initialize` request (the schema check only for what names the method: it costs more than the rest of a call). */
const isInitialize = (m: unknown) =>
  (m as { method?: unknown } | null)?.method === 'initialize' && isInitializeRequest(m)

/**
 * Whether the SDK's transport would hand this message to the server as it is and answer it in
 * JSON: a POST of one JSON-RPC request with the headers the transport asks for. Those are
 * answered by a pooled server directly (`answerDirectly`); everything else (initialize,
 * batches, notifications, malformed messages and their errors, other media types) goes
 * through the SDK's transport.
 */
function directlyAnswerable(
  method: string,
  headers: Record<string, string>,
  parsed: unknown
): parsed is JSONRPCRequest {
  if (method !== 'POST') return false
  const accept = headers['accept']
  if (!accept?.includes('application/json') || !accept.includes('text/event-stream')) return false
  if (headers['content-type'] !== 'application/json') return false
  const version = headers['mcp-protocol-version']
  if (version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) return false
  return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) && isJSONRPCRequest(parsed)
}

/**
 * `/api/mcp` (Cairn as an MCP server, Streamable HTTP) and `/api/mcp-servers` (the org's
 * MCP servers whose tools runs may call).
 *
 * Sessions across instances: every request is served by a server that holds nothing of a
 * session or caller (the caller comes with the request), so no instance keeps a session's
 * state in memory. `initialize` stores a row (`mcp_sessions`: its id, org and caller) and
 * answers its id as `Mcp-Session-Id`; a later request on any instance is served when that
 * row exists for the same caller and was used within MCP_SESSION_IDLE_HOURS (else 404, and
 * the client initializes again); `DELETE` removes the row. Instances keep a memo of the
 * rows they have seen, forgotten when a session ends (see `knownSessions`).
 *
 * A request the SDK's transport would simply hand to the server (`directlyAnswerable`: one
 * JSON-RPC request, the usual headers) is answered by a pooled server on a transport of its
 * own (`answerDirectly`); everything else goes through the SDK's Streamable HTTP transport,
 * built for the request, which checks and refuses what it must.
 */
const mcpRoutes: FastifyPluginAsyncTypebox<{ sessionIdleHours: number }> = async (app, opts) => {
  const idleSeconds = opts.sessionIdleHours * 3600

  // ---- /api/mcp -----------------------------------------------------------------

  await app.register(async function mcpEndpoint(scope) {
    // the body is the SDK's to read: a malformed message gets its JSON-RPC error, not our 400
    scope.removeAllContentTypeParsers()
    // (the usual type named too: Fastify remembers a named type's parser, and parses the header for the catch-all)
    scope.addContentTypeParser(['application/json', '*'], { parseAs: 'string' }, (_request, body, done) =>
      done(null, body)
    )

    const memo = (() => {
      let known = knownSessions.get(scope.db)
      if (!known) knownSessions.set(scope.db, (known = { sessions: new Map(), generation: 0 }))
      return known
    })()
    // the open GET streams (server streams) of this instance, with their session: a GET's stream
    // is cut when the instance stops (its client reconnects, to any instance; ending it is not
    // enough for a client that already went away without a word), and ended when its session ends
    const streams = new Map<FastifyReply['raw'], string>()
    const forget = (id?: string) => {
      // a row read before this and answered after it must not be remembered
      memo.generation++
      if (id === undefined) memo.sessions.clear()
      else {
        memo.sessions.delete(id)
        for (const [stream, session] of streams) if (session === id) stream.end()
      }
    }
    const unlisten = await app.database.listen(
      SESSION_ENDED,
      (id) => forget(id),
      () => forget()
    )
    scope.addHook('preClose', async () => {
      await app.shutdown.close('the MCP session listener', () => unlisten().catch(() => {}))
    })

    /** The live session of this id for this caller, its last use written now and then; false when there is none. */
    async function sessionLive(principal: Principal, id: string): Promise<boolean> {
      if (id.length > 128) return false
      const holder = holderOf(principal)
      const known = memo.sessions.get(id)
      if (known && Date.now() - known.usedAt < idleSeconds * 1000 - MEMO_MARGIN_MS) {
        if (known.orgId !== principal.orgId || known.holder !== holder) return false
        if (Date.now() - known.usedAt < TOUCH_EVERY_S * 1000) return true
        // time to write its last use: the row answers (and is touched) as without a memo
      }
      const generation = memo.generation
      const rows = rowsOf<{ stale: unknown; used_ms: unknown }>(
        await scope.db.execute(sql`
        select (last_used_at < now() - make_interval(secs => ${TOUCH_EVERY_S})) as stale,
               (extract(epoch from last_used_at) * 1000)::float8 as used_ms from mcp_sessions
        where id = ${id} and org_id = ${principal.orgId} and principal = ${holder}
          and last_used_at > now() - make_interval(secs => ${idleSeconds})`)
      )
      if (rows.length === 0) {
        // (another caller's request leaves the owner's entry alone)
        if (known && known.orgId === principal.orgId && known.holder === holder) memo.sessions.delete(id)
        return false
      }
      let usedAt = Number(rows[0]!.used_ms)
      if (boolOf(rows[0]!.stale)) {
        await scope.db.execute(sql`update mcp_sessions set last_used_at = now() where id = ${id}`)
        usedAt = Date.now()
      }
      if (memo.generation === generation) memo.sessions.set(id, { orgId: principal.orgId, holder, usedAt })
      return true
    }

    /**
     * Servers whose request ended, for the next requests: building one (its handlers and the
     * SDK's own) for every request cost as much as the rest of the SDK's work on a call.
     */
    const idleServers: Server[] = []

    /** Idle servers, each connected to a transport of its own for good, for `answerDirectly`. */
    const directServers: Array<{ server: Server; transport: RequestTransport }> = []

    /**
     * One JSON-RPC request answered by a pooled server, as the SDK's transport would answer it
     * (see `directlyAnswerable`) but without building a Web request and response and
     * connecting a server for it.
     */
    async function answerDirectly(
      reply: FastifyReply,
      message: JSONRPCRequest,
      sessionId: string,
      extra: MessageExtraInfo
    ) {
      let direct = directServers.pop()
      if (!direct) {
        direct = { server: buildMcpServer(), transport: new RequestTransport() }
        await direct.server.connect(direct.transport)
      }
      const { server, transport } = direct
      let answered = false
      // a client that goes away first aborts the work (closing a server aborts its handlers); that server is done
      reply.raw.once('close', () => {
        if (!answered) void server.close().catch(() => {})
      })
      const answer = await transport.answer(message, extra)
      answered = true
      if (answer && directServers.length < IDLE_SERVERS) directServers.push(direct)
      else void server.close().catch(() => {})
      const closed = { code: ErrorCode.ConnectionClosed, message: 'Connection closed' }
      return reply
        .code(200)
        .header('content-type', 'application/json')
        .header('mcp-session-id', sessionId)
        .send(JSON.stringify(answer ?? { jsonrpc: '2.0', id: message.id, error: closed }))
    }

    scope.addHook('preClose', async () => {
      for (const stream of streams.keys()) stream.destroy()
    })

    async function serve(request: FastifyRequest, reply: FastifyReply) {
      const principal = principalOf(request)
      const raw = typeof request.body === 'string' ? request.body : undefined
      let parsed: unknown
      try {
        parsed = raw === undefined ? undefined : JSON.parse(raw)
      } catch {
        parsed = undefined
      }
      const initializing =
        request.method === 'POST' && (isInitialize(parsed) || (Array.isArray(parsed) && parsed.some(isInitialize)))
      const header = request.headers['mcp-session-id']
      const sessionId = typeof header === 'string' ? header : undefined
      // a message that is not JSON is the transport's to refuse (a JSON-RPC parse error)
      if ((!initializing && parsed !== undefined) || request.method !== 'POST') {
        if (sessionId === undefined)
          return rpcError(reply, 400, -32000, 'Bad Request: Mcp-Session-Id header is required')
        if (!(await sessionLive(principal, sessionId))) return rpcError(reply, 404, -32001, 'Session not found')
      }
      if (request.method === 'DELETE' && sessionId !== undefined) {
        // every instance forgets it when it hears the notice (this one too, before it answers)
        await scope.db.execute(sql`
          with ended as (delete from mcp_sessions where id = ${sessionId} and org_id = ${principal.orgId} returning id)
          select pg_notify(${SESSION_ENDED}, id) from ended`)
        forget(sessionId)
      }
      const headers: Record<string, string> = {}
      for (const name of FORWARDED) {
        const value = request.headers[name]
        if (typeof value === 'string') headers[name] = value
      }
      const caller: McpCaller = {
        app,
        principal,
        log: request.log,
        connection: request.raw,
        async idempotent(route, key, body, work) {
          if (key === undefined) return work(null)
          return idempotentWork(scope.db, { orgId: principal.orgId, route, key, principal, body }, work)
        }
      }
      if (!initializing && sessionId !== undefined && directlyAnswerable(request.method, headers, parsed))
        return answerDirectly(reply, parsed, sessionId, {
          authInfo: callerAuth(caller),
          requestInfo: { headers, url: new URL(`http://cairn.invalid${request.url}`) }
        })
      const transport = new WebStandardStreamableHTTPServerTransport(
        initializing
          ? {
              sessionIdGenerator: () => newId(),
              enableJsonResponse: true,
              onsessioninitialized: async (id) => {
                await scope.db
                  .insert(mcpSessions)
                  .values({ id, orgId: principal.orgId, principal: holderOf(principal) })
                memo.sessions.set(id, { orgId: principal.orgId, holder: holderOf(principal), usedAt: Date.now() })
                // ended sessions are deleted by whoever opens a new one (and forgotten by the memo)
                for (const [known, entry] of memo.sessions)
                  if (Date.now() - entry.usedAt > idleSeconds * 1000) memo.sessions.delete(known)
                await scope.db.execute(
                  sql`delete from mcp_sessions where last_used_at < now() - make_interval(secs => ${idleSeconds})`
                )
              }
            }
          : // stateless per request: the session was checked above, against its row
            { sessionIdGenerator: undefined, enableJsonResponse: true }
      )
      const server = idleServers.pop() ?? buildMcpServer()
      // kept for the next request once this one's answer is whole (below); until then closed with its request
      let reusable = false
      if (request.method === 'GET' && sessionId !== undefined) streams.set(reply.raw, sessionId)
      reply.raw.once('close', () => {
        streams.delete(reply.raw)
        if (!reusable) void server.close().catch(() => {})
      })
      await server.connect(transport)
      // a parsed message goes to the transport as such; only what is not JSON goes as text (its parse error is the
      // SDK's)
      const answer = await transport.handleRequest(
        new Request(`http://cairn.invalid${request.url}`, {
          method: request.method,
          headers,
          ...(raw !== undefined && parsed === undefined ? { body: raw } : {})
        }),
        { authInfo: callerAuth(caller), ...(parsed === undefined ? {} : { parsedBody: parsed }) }
      )
      if (!initializing && sessionId !== undefined) reply.header('mcp-session-id', sessionId)
      // a JSON answer is a few hundred bytes: sent as text, not piped from its Web stream
      if (answer.headers.get('content-type')?.startsWith('application/json')) {
        const text = await answer.text()
        // every answer of the message is in it: nothing of this request runs on (nor, when
        // closed, could it send), so the server serves the next request. Not after initialize,
        // which leaves the client's capabilities on the server
        if (!initializing && idleServers.length < IDLE_SERVERS) {
          reusable = true
          await server.close()
          idleServers.push(server)
        }
        reply.code(answer.status)
        answer.headers.forEach((value, name) => void reply.header(name, value))
        return reply.send(text)
      }
      if (request.method === 'GET' && answer.ok && answer.body) {
        // the server stream: Node sends a response's head with its first bytes, and a session's
        // stream may stay quiet for hours, so a comment line (which SSE readers skip) goes first
        // and the client knows at once that its stream is open
        reply.code(answer.status)
        answer.headers.forEach((value, name) => void reply.header(name, value))
        return reply.send(answer.body.pipeThrough(openedStream()))
      }
      return reply.send(answer)
    }

    const common = { headers: McpHeaders }
    // errors as they are answered: JSON-RPC errors from the transport, ErrorBody before it
    scope.post(
      '/mcp',
      {
        config: { keyAccess: 'dispatch' },
        schema: {
          operationId: 'mcpMessage',
          tags: TAGS,
          summary:
            "MCP Streamable HTTP: send a JSON-RPC message (initialize first; its answer's Mcp-Session-Id goes with every later request)",
          description:
            'Takes one JSON-RPC message of the Model Context Protocol (initialize, tools/list, tools/call, ...) and answers it as JSON or as an event stream.',
          ...common,
          body: McpMessage,
          response: {
            200: McpAnswer,
            202: { type: 'null', description: 'the notification or response was accepted; no body' },
            ...mcpErrorAnswers(406, 413, 415)
          }
        },
        // the SDK checks the message; the schema is only the document's
        validatorCompiler: () => () => true
      },
      serve
    )
    scope.get(
      '/mcp',
      {
        config: { keyAccess: 'read' },
        exposeHeadRoute: false,
        schema: {
          operationId: 'mcpStream',
          tags: TAGS,
          summary: "MCP Streamable HTTP: the server's stream of a session (SSE)",
          description:
            "Opens the event stream on which the MCP server sends a session's messages that are not answers to a request.",
          ...common,
          response: { 200: McpStream, ...mcpErrorAnswers(406) }
        }
      },
      serve
    )
    scope.delete(
      '/mcp',
      {
        config: { keyAccess: 'dispatch' },
        schema: {
          operationId: 'mcpEndSession',
          tags: TAGS,
          summary: 'MCP Streamable HTTP: end a session',
          description: 'Ends the MCP session named by Mcp-Session-Id.',
          ...common,
          response: { 200: { type: 'null', description: 'the session ended; no body' }, ...mcpErrorAnswers() }
        }
      },
      serve
    )
  })

  // ---- /api/mcp-servers ---------------------------------------------------------

  app.post(
    '/mcp-servers',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'createMcpServer',
        tags: TAGS,
        summary:
          'Connect an MCP server (admin): header values are sealed as secrets; the server is checked once at once',
        description:
          'Registers an external MCP server by URL, seals its headers as secrets, and connects once to list its tools.',
        body: CreateMcpServerBody,
        response: { 201: McpServerEnvelope, ...errorResponses(409, 413, 503) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const row = await app.mcp.create(principal.orgId, request.body, realUserId(principal))
      return reply.code(201).send({ server: mcpServerToWire(row) })
    }
  )

  app.get(
    '/mcp-servers',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listMcpServers',
        tags: TAGS,
        summary: "The org's MCP servers, oldest first, with the tools each listed at its last check",
        description:
          "Lists the organization's MCP servers, oldest first, with the tools each offered when last checked.",
        querystring: ListMcpServersQuery,
        response: { 200: McpServerPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listMcpServers(app.db, orgId, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(mcpServerToWire), nextCursor: page.nextCursor }
    }
  )

  app.post(
    '/mcp-servers/:id/check',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'checkMcpServer',
        tags: TAGS,
        summary: 'Connect to the server and list its tools now (admin): ready, or lastError saying why not',
        description: 'Connects to the MCP server now, lists its tools and records whether it is ready or why not.',
        params: IdParams,
        response: { 200: McpServerEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const row = await app.mcp.check(orgId, request.params.id)
      if (!row) throw notFound('no such MCP server in this organization')
      return { server: mcpServerToWire(row) }
    }
  )

  app.delete(
    '/mcp-servers/:id',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'deleteMcpServer',
        tags: TAGS,
        summary: 'Remove an MCP server and its sealed headers (admin); its tools are no longer offered',
        description: 'Removes an MCP server and its sealed headers, so runs no longer get its tools.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await app.mcp.remove(orgId, request.params.id))) throw notFound('no such MCP server in this organization')
      return reply.code(204).send(null)
    }
  )
}

// started only where the services it uses are: the org's MCP servers (app.mcp), and what the
// /api/mcp endpoint's tools reach (memory, knowledge, skill runs and runs, approvals); a group
// app without one of them fails at boot, naming it
export default fp(mcpRoutes, {
  name: 'mcp-routes',
  fastify: '5.x',
  dependencies: [
    'db',
    'shutdown-refusals',
    'principal',
    'idempotency',
    'mcp',
    'memory',
    'retrieval',
    'knowledge',
    'skills',
    'runs',
    'runtime'
  ],
  encapsulate: true
})
