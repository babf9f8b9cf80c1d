// Cairn as an MCP server: the tools and resources one caller sees, built for each request
// of /api/mcp (src/mcp/index.ts) on the SDK's low-level Server. Every tool acts as the
// caller, through the same services as the matching HTTP route.
import type { EventEmitter } from 'node:events'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv'
import {
  CallToolRequestSchema,
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  type CallToolResult
} from '@modelcontextprotocol/sdk/types.js'
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import { Type, type Static, type TSchema } from 'typebox'
import { Compile, type Validator } from 'typebox/compile'
import { ApiError } from '../../plugins/errors.js'
import { findHostileInput } from '../../plugins/hostile-input.js'
import type { IdempotencyLock, StoredAnswer } from '../../plugins/idempotency/index.js'
import { StrictObject } from '../../schemas/common.js'
import type { Principal } from '../auth/principal.js'
import { decodeCursor } from '../db/paging.js'
import { getRecord, listRecords } from '../knowledge/records-repo.js'
import { searchMemoryAs } from '../memory/search-as.js'
import { waitForEnd } from '../runs/index.js'
import { getRun, listThreads, runToWire, type RunRow } from '../runs/runs-repo.js'
import { TERMINAL_STATUSES } from '../runs/tables.js'
import { dispatchSkillRun } from '../skills/run-skill.js'
import { decideApprovalAs, listApprovalsAs, pendingCallsOf } from '../runtime/approvals-as.js'

export const SERVER_INFO = { name: 'cairn', version: '1.0.0' }
/**
 * The SDK's JSON Schema validator (for elicitation answers, which this server never asks
 * for), made once per process: by default every Server builds its own Ajv instance and
 * compiles the meta-schemas, which was most of the cost of a request's fresh server.
 */
const VALIDATOR = new AjvJsonSchemaValidator()
const RESOURCE_PREFIX = 'cairn://knowledge/'
const RESOURCE_PAGE = 100

const Id = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' })
const WaitSeconds = Type.Integer({
  minimum: 0,
  maximum: 60,
  description:
    "wait up to this many seconds for the run to end; it answers with the run's output if it ends in time, else with its id and status (default 0: answer at once)"
})
const IdempotencyKey = Type.String({
  minLength: 1,
  maxLength: 255,
  description:
    'a key of your choice: the same call again with the same key starts nothing new and answers the first run (kept 24 hours)'
})

const Mode = Type.Optional(
  Type.Union([Type.Literal('hybrid'), Type.Literal('semantic'), Type.Literal('fulltext')], {
    description:
      'hybrid (default): words and meaning fused; semantic: meaning only; fulltext: words only (each result says which matched in scores)'
  })
)

const TOOLS = {
  memory_search: {
    description:
      'Search the organization\'s memory (facts Cairn remembered from earlier runs and that people added), or your personal memory with scope "personal" (signed-in people only).',
    schema: StrictObject({
      query: Type.String({ minLength: 1, maxLength: 2000, description: 'what to look for' }),
      scope: Type.Optional(
        Type.Union([Type.Literal('org'), Type.Literal('personal')], { description: 'org (default) or personal' })
      ),
      limit: Type.Optional(
        Type.Integer({ minimum: 1, maximum: 100, description: 'at most this many facts (default 20)' })
      ),
      mode: Mode
    })
  },
  knowledge_search: {
    description:
      'Search the organization\'s knowledge base (records and uploaded documents), best first. Web search syntax: words, "quoted phrases", or, -excluded. Records can be read whole as resources cairn://knowledge/<id>.',
    schema: StrictObject({
      query: Type.String({ minLength: 1, maxLength: 500, description: 'a web search query' }),
      limit: Type.Optional(
        Type.Integer({ minimum: 1, maximum: 50, description: 'at most this many hits (default 10)' })
      ),
      mode: Mode
    })
  },
  list_threads: {
    description:
      "The organization's conversation threads, newest first: each with its first prompt, run count and latest status.",
    schema: StrictObject({
      limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, description: 'at most this many (default 50)' }))
    })
  },
  get_run: {
    description:
      'One run of the organization: its status, prompt, output (once it succeeded) and error; a run in requires_action lists the tool calls waiting for a decision (pendingApprovals: id, tool, arguments).',
    schema: StrictObject({ id: Id })
  },
  start_run: {
    description:
      "Start a Cairn agent run with a prompt (in an existing thread with rootRunId). With waitSeconds, answers with the run's output if it ends in time; otherwise with its id and status (then use get_run). A run in requires_action waits for a decision on the tool calls it lists (pendingApprovals): use decide_approval.",
    schema: StrictObject({
      prompt: Type.String({ minLength: 1, maxLength: 100_000, description: 'what the agent is asked' }),
      rootRunId: Type.Optional(Id),
      model: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 200,
          description: "a model id the organization offers (default: the organization's default model)"
        })
      ),
      waitSeconds: Type.Optional(WaitSeconds),
      idempotencyKey: Type.Optional(IdempotencyKey)
    })
  },
  run_skill: {
    description:
      "Run one of the organization's skills on an input (its instructions guide the agent). With waitSeconds, answers with the output if the run ends in time; otherwise with its id and status.",
    schema: StrictObject({
      skillId: Id,
      input: Type.Optional(Type.String({ maxLength: 100_000, description: 'what the skill works on' })),
      waitSeconds: Type.Optional(WaitSeconds),
      idempotencyKey: Type.Optional(IdempotencyKey)
    })
  },
  list_approvals: {
    description:
      "A run's tool calls that needed a decision, pending and decided, oldest first (50 a page; nextCursor for the next).",
    schema: StrictObject({
      runId: Id,
      cursor: Type.Optional(
        Type.String({ minLength: 1, maxLength: 1024, description: 'the nextCursor of the previous page' })
      )
    })
  },
  decide_approval: {
    description:
      'Approve or deny a tool call a run waits for (once); the run goes on once its last pending call is decided. Allowed to the person who started the run, an organization owner or admin, or an API key of the organization.',
    schema: StrictObject({
      runId: Id,
      approvalId: Id,
      decision: Type.Union([Type.Literal('approve'), Type.Literal('deny')], { description: 'approve or deny' })
    })
  }
} as const satisfies Record<string, { description: string; schema: TSchema }>

type ToolName = keyof typeof TOOLS
type Args<N extends ToolName> = Static<(typeof TOOLS)[N]['schema']>

/** Each tool's argument check, compiled once per process (the interpreted check cost as much as the search's SQL). */
const CHECKS = Object.fromEntries(
  (Object.keys(TOOLS) as ToolName[]).map((name) => [name, Compile(TOOLS[name].schema)])
) as Record<ToolName, Validator>

/** The tools as tools/list answers them: plain JSON Schema, no TypeBox symbols. */
const TOOL_LIST = (Object.keys(TOOLS) as ToolName[]).map((name) => ({
  name,
  description: TOOLS[name].description,
  inputSchema: JSON.parse(JSON.stringify(TOOLS[name].schema)) as { type: 'object'; [key: string]: unknown }
}))

/** What a request of /api/mcp gives the server it builds. */
export interface McpCaller {
  app: FastifyInstance
  principal: Principal
  log: FastifyBaseLogger
  /** closes when the HTTP request goes away (a wait for a run's end stops then) */
  connection: EventEmitter
  /**
   * Runs a dispatch under an idempotency key of the caller's (as `POST /api/runs`
   * does with the header): the first answer is stored, a repeat gets it back.
   */
  idempotent(
    route: string,
    key: string | undefined,
    body: unknown,
    work: (lock: IdempotencyLock | null) => Promise<StoredAnswer>
  ): Promise<StoredAnswer>
}

/** A knowledge snippet as plain text: the search's <mark> tags and HTML escapes undone. */
export function plainSnippet(html: string): string {
  return html
    .replace(/<\/?mark>/g, '')
    .replace(
      /&(lt|gt|quot|#39|amp);/g,
      (_, entity: string) => ({ lt: '<', gt: '>', quot: '"', '#39': "'", amp: '&' })[entity] ?? ''
    )
}

const json = (value: unknown): CallToolResult => ({ content: [{ type: 'text', text: JSON.stringify(value) }] })
const failure = (error: string, message: string, extra: Record<string, unknown> = {}): CallToolResult => ({
  isError: true,
  content: [{ type: 'text', text: JSON.stringify({ error, message, ...extra }) }]
})

/** The first problem of a tool's arguments, in the words of the HTTP routes' 400. */
function argumentProblem(check: Validator, args: unknown): string | null {
  const hostile = findHostileInput(args)
  if (hostile) return `${hostile.instancePath || '/'} ${hostile.message}`
  if (check.Check(args)) return null
  const [first] = check.Errors(args)
  return first ? `${first.instancePath || '/'} ${first.message}` : 'invalid arguments'
}

/**
 * What a tool answers of a run beside the run itself: the calls it waits for, when it is in
 * `requires_action` (so a client sees what to decide without another call).
 */
async function pendingOf(app: FastifyInstance, run: RunRow) {
  return run.status === 'requires_action' ? { pendingApprovals: await pendingCallsOf(app, run.orgId, run.id) } : {}
}

/** A run as a tool answers it: its id and status, its output or error once it ended, the calls it waits for. */
async function runAnswer(app: FastifyInstance, run: RunRow) {
  const wire = runToWire(run)
  const ended = TERMINAL_STATUSES.includes(run.status)
  return {
    id: wire.id,
    rootRunId: wire.rootRunId,
    status: wire.status,
    ...(ended ? { output: wire.output, error: wire.error } : {}),
    ...(await pendingOf(app, run))
  }
}

/** How a request gives its caller to the server: in the transport's `authInfo`, which the SDK hands every handler. */
export function callerAuth(caller: McpCaller): AuthInfo {
  return { token: '', clientId: caller.principal.orgId, scopes: [], extra: { caller } }
}

function callerOf(extra: { authInfo?: AuthInfo }): McpCaller {
  const caller = extra.authInfo?.extra?.caller as McpCaller | undefined
  // every request of /api/mcp gives one (src/mcp/index.ts); a server without one serves no one
  if (!caller) throw new McpError(ErrorCode.InternalError, 'no caller')
  return caller
}

/**
 * Builds a server. It holds nothing of a caller: each request's caller comes with the
 * request (`callerAuth`), so one server serves request after request (src/mcp/index.ts
 * keeps the idle ones), one request at a time.
 */
export function buildMcpServer(): Server {
  const server = new Server(SERVER_INFO, {
    jsonSchemaValidator: VALIDATOR,
    capabilities: { tools: {}, resources: {} },
    instructions:
      "Cairn: the team's memory, knowledge base and agent runs. Search memory and knowledge, read knowledge records as resources, list threads, start runs or skills, and approve or deny the tool calls a run waits for."
  })

  /** A run started through a dispatch, waited for when asked. */
  async function startedRun(
    caller: McpCaller,
    answer: StoredAnswer,
    waitSeconds: number | undefined
  ): Promise<CallToolResult> {
    const { app } = caller
    const { orgId } = caller.principal
    const body = JSON.parse(answer.payload) as { run?: { id: string }; error?: string; message?: string }
    if (answer.status >= 400 || !body.run)
      return failure(body.error ?? 'failed', body.message ?? 'the run was not started')
    const run = waitSeconds
      ? await waitForEnd(app, orgId, body.run.id, waitSeconds * 1000, caller.connection)
      : await getRun(app.db, orgId, body.run.id)
    if (!run) return failure('not_found', 'no such run in this organization')
    return json(await runAnswer(app, run))
  }

  const handlers: { [N in ToolName]: (caller: McpCaller, args: Args<N>) => Promise<CallToolResult> } = {
    async memory_search({ app, principal }, args) {
      const found = await searchMemoryAs(app, principal, {
        scope: args.scope ?? 'org',
        q: args.query,
        limit: args.limit,
        mode: args.mode
      })
      if ('failedClosed' in found) return failure('sign-in required', 'personal memory needs a signed-in user')
      return json({
        enabled: found.enabled,
        scope: found.scope,
        truncated: found.truncated,
        mode: found.mode,
        items: found.items
      })
    },
    async knowledge_search({ app, principal: { orgId } }, args) {
      const outcome = await app.knowledge.search(orgId, { q: args.query, limit: args.limit ?? 10, mode: args.mode })
      return json({
        truncated: outcome.truncated,
        mode: outcome.mode,
        items: outcome.items.map((hit) => ({ ...hit, snippet: plainSnippet(hit.snippet) }))
      })
    },
    async list_threads({ app, principal: { orgId } }, args) {
      return json(await listThreads(app.db, orgId, { limit: args.limit ?? 50, cursor: undefined }))
    },
    async get_run({ app, principal: { orgId } }, args) {
      const run = await getRun(app.db, orgId, args.id)
      if (!run) return failure('not_found', 'no such run in this organization')
      return json({ run: runToWire(run), ...(await pendingOf(app, run)) })
    },
    async list_approvals({ app, principal }, args) {
      return json(await listApprovalsAs(app, principal, args.runId, { limit: 50, cursor: args.cursor }))
    },
    async decide_approval({ app, principal }, args) {
      return json(await decideApprovalAs(app, principal, args.runId, args.approvalId, args.decision))
    },
    async start_run(caller, args) {
      const { app, principal } = caller
      const body = {
        prompt: args.prompt,
        ...(args.rootRunId ? { rootRunId: args.rootRunId } : {}),
        ...(args.model ? { model: args.model } : {})
      }
      const answer = await caller.idempotent('mcp start_run', args.idempotencyKey, body, (idempotency) =>
        app.runs.dispatch({ principal, body, idempotency, log: caller.log, origin: 'mcp' })
      )
      return startedRun(caller, answer, args.waitSeconds)
    },
    async run_skill(caller, args) {
      const { app, principal } = caller
      const body = args.input === undefined ? null : { input: args.input }
      const answer = await caller.idempotent(
        `mcp run_skill ${args.skillId}`,
        args.idempotencyKey,
        body,
        (idempotency) => dispatchSkillRun(app, { principal, skillId: args.skillId, body, idempotency, log: caller.log })
      )
      return startedRun(caller, answer, args.waitSeconds)
    }
  }

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOL_LIST }))

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const caller = callerOf(extra)
    const name = request.params.name
    if (!Object.hasOwn(TOOLS, name))
      throw new McpError(
        ErrorCode.InvalidParams,
        `unknown tool ${JSON.stringify(name.slice(0, 100))}; the tools are ${Object.keys(TOOLS).join(', ')}`
      )
    const tool = name as ToolName
    const args = request.params.arguments ?? {}
    const problem = argumentProblem(CHECKS[tool], args)
    if (problem !== null) return failure('validation_failed', `invalid arguments: ${problem}`)
    try {
      return await (handlers[tool] as (caller: McpCaller, args: unknown) => Promise<CallToolResult>)(caller, args)
    } catch (err) {
      // the HTTP route's refusal, in its words (404 not_found, 400 engine_unavailable, …)
      if (err instanceof ApiError) return failure(err.error, err.message, err.extra ?? {})
      caller.log.error({ err, tool }, 'mcp: a tool failed')
      return failure('internal_error', 'the tool failed; the server log has the details')
    }
  })

  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: `${RESOURCE_PREFIX}{id}`,
        name: 'knowledge record',
        description: "A record of the organization's knowledge base, as Markdown",
        mimeType: 'text/markdown'
      }
    ]
  }))

  server.setRequestHandler(ListResourcesRequestSchema, async (request, extra) => {
    const { app, principal } = callerOf(extra)
    let cursor: string | undefined = request.params?.cursor
    try {
      decodeCursor(cursor)
    } catch {
      throw new McpError(ErrorCode.InvalidParams, 'the cursor is not one this server gave')
    }
    const page = await listRecords(app.db, principal.orgId, { limit: RESOURCE_PAGE, cursor })
    cursor = page.nextCursor ?? undefined
    return {
      resources: page.items.map((record) => ({
        uri: `${RESOURCE_PREFIX}${record.id}`,
        name: record.title,
        title: record.title,
        mimeType: 'text/markdown'
      })),
      ...(cursor ? { nextCursor: cursor } : {})
    }
  })

  server.setRequestHandler(ReadResourceRequestSchema, async (request, extra) => {
    const { app, principal } = callerOf(extra)
    const { uri } = request.params
    const id = uri.startsWith(RESOURCE_PREFIX) ? uri.slice(RESOURCE_PREFIX.length) : ''
    const record = /^[A-Za-z0-9_-]{1,64}$/.test(id) ? await getRecord(app.db, principal.orgId, id) : null
    // another org's record is as unknown as one that never was
    if (!record) throw new McpError(-32002, `Resource not found: ${uri.slice(0, 200)}`)
    return {
      contents: [
        {
          uri: `${RESOURCE_PREFIX}${record.id}`,
          mimeType: 'text/markdown',
          text: `# ${record.title}\n\n${record.body}`
        }
      ]
    }
  })

  return server
}
