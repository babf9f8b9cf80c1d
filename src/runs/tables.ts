import { sql } from 'drizzle-orm'
import { bigserial, boolean, check, index, integer, jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { ts } from '../db/columns.js'
import { RUN_ORIGINS, RUN_STATUSES } from '../../schemas/runs.js'
import { organizations } from '../auth/tables.js'
import { sqlList } from '../db/sql-list.js'

export { RUN_ORIGINS, RUN_STATUSES }
export type RunStatus = (typeof RUN_STATUSES)[number]
export const TERMINAL_STATUSES: readonly RunStatus[] = ['succeeded', 'failed', 'cancelled']

export type RunOrigin = (typeof RUN_ORIGINS)[number]

/** How a run's model is asked: each field unset (absent) unless the run named it. */
export interface RunSettings {
  temperature?: number
  maxOutputTokens?: number
  responseFormat?:
    { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; name: string; schema: Record<string, unknown> }
  /** the tools the run may use; absent: all */
  tools?: string[]
}

/**
 * A run waiting for people's decisions: what it resumes from, on any
 * instance. `messages` is the model conversation up to and including the assistant
 * message that asked for `calls`; a call with `content` has its result already (executed
 * or answered before the run left its worker) and is never executed again. The tokens
 * spent before are the run's own (input_tokens, output_tokens), stored with it.
 */
/** A fact the `remember` tool kept on the run until it ends. */
export interface RememberedFact {
  content: string
  scope: 'org' | 'personal'
}

export interface SuspendedRun {
  messages: unknown[]
  /** the tool round that waits (0 for the first model answer) */
  round: number
  calls: Array<{
    id: string
    name: string
    arguments: string
    content?: string | undefined
    approvalId?: string | undefined
  }>
}

export const runs = pgTable(
  'runs',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    rootRunId: text('root_run_id').notNull(),
    parentRunId: text('parent_run_id'),
    engine: text('engine').notNull(),
    model: text('model'),
    prompt: text('prompt').notNull(),
    status: text('status').$type<RunStatus>().notNull().default('queued'),
    origin: text('origin').$type<RunOrigin>().notNull(),
    error: text('error'),
    metadata: jsonb('metadata').$type<Record<string, unknown>>().notNull().default({}),
    /** the org secrets the run named: its sandbox's environment, redacted from all it stores */
    secretNames: jsonb('secret_names').$type<string[]>().notNull().default([]),
    userId: text('user_id'),
    /** the final assistant text of a succeeded run (null otherwise) */
    output: text('output'),
    /** sent as the first system message */
    instructions: text('instructions'),
    settings: jsonb('settings').$type<RunSettings>().notNull().default({}),
    /** upload ids copied into the workspace before the run starts */
    attachments: jsonb('attachments').$type<string[]>().notNull().default([]),
    createdAt: ts('created_at').notNull().defaultNow(),
    startedAt: ts('started_at'),
    finishedAt: ts('finished_at'),
    /** tokens the engine reported at the end (null: none reported); summed into usage_hours */
    inputTokens: integer('input_tokens'),
    outputTokens: integer('output_tokens'),
    /**
     * a succeeded run's transcript size in UTF-8 bytes as a later run of its thread is sent it,
     * whole and with long tool results shortened: stored when it ends, so a thread's history is
     * measured from its runs alone (null: no transcript, its prompt and answer are sent)
     */
    contextBytes: integer('context_bytes'),
    contextShortBytes: integer('context_short_bytes'),
    /** the worker instance holding the run while it is `running` */
    leaseOwner: text('lease_owner'),
    leaseExpiresAt: ts('lease_expires_at'),
    cancelRequested: boolean('cancel_requested').notNull().default(false),
    /** while `requires_action`: the conversation so far and the tool calls of the round that waits */
    suspended: jsonb('suspended').$type<SuspendedRun>(),
    /**
     * facts the model asked to remember (the `remember` tool), captured when the run ends whatever its status
     */
    remembered: jsonb('remembered').$type<RememberedFact[]>(),
    /**
     * while `requires_action`: when a worker may take the run again (every call decided: now; else its first approval's
     * expiry)
     */
    resumeAt: ts('resume_at'),
    /**
     * the W3C `traceparent` of the span that started the run (the request, or the run that ended and started it): the
     * run's spans continue that trace on whichever instance executes it; null when tracing was off
     */
    traceparent: text('traceparent')
  },
  (t) => [
    index('runs_org_id_idx').on(t.orgId, t.id),
    index('runs_org_root_idx').on(t.orgId, t.rootRunId, t.id),
    // the claim and the sweeper look only at live rows
    index('runs_queued_idx')
      .on(t.createdAt)
      .where(sql`status = 'queued'`),
    // an org's queued runs, oldest first: counted before another is accepted
    // (RUN_QUEUE_MAX_PER_ORG), and the claim's way to each org's next run (fair claiming)
    index('runs_org_queued_idx')
      .on(t.orgId, t.createdAt, t.id)
      .where(sql`status = 'queued'`),
    index('runs_running_lease_idx')
      .on(t.leaseExpiresAt)
      .where(sql`status = 'running'`),
    index('runs_waiting_idx')
      .on(t.resumeAt)
      .where(sql`status = 'requires_action'`),
    check('runs_status_check', sql`${t.status} in (${sqlList(RUN_STATUSES)})`),
    check('runs_origin_check', sql`${t.origin} in (${sqlList(RUN_ORIGINS)})`)
  ]
)

/**
 * Every event of every run, stored before it is sent. The id comes from a sequence; the
 * writer holds a per-org advisory lock until commit, so within an org ids commit in
 * increasing order and a stream resumed after id N has missed nothing below N.
 */
export const runEvents = pgTable(
  'run_events',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    orgId: text('org_id').notNull(),
    runId: text('run_id').notNull(),
    rootRunId: text('root_run_id').notNull(),
    type: text('type').notNull(),
    data: jsonb('data').$type<Record<string, unknown>>().notNull().default({}),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [
    index('run_events_org_idx').on(t.orgId, t.id),
    index('run_events_run_idx').on(t.runId, t.id),
    index('run_events_root_idx').on(t.rootRunId, t.id),
    index('run_events_created_idx').on(t.createdAt)
  ]
)

/**
 * One `POST /api/chat` completion, metered like a run: the usage rollup's
 * trigger (usage_add_finished_run, 0021) counts it by engine, model and user when it is
 * stored, finished. Nothing else reads it; rows go with their org.
 */
export const chatCompletions = pgTable(
  'chat_completions',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    engine: text('engine').notNull(),
    model: text('model'),
    userId: text('user_id'),
    status: text('status').$type<'succeeded' | 'failed' | 'cancelled'>().notNull(),
    startedAt: ts('started_at').notNull(),
    finishedAt: ts('finished_at').notNull(),
    inputTokens: integer('input_tokens'),
    outputTokens: integer('output_tokens')
  },
  (t) => [index('chat_completions_org_idx').on(t.orgId, t.id)]
)

/** A tool call as a transcript keeps it: its id, the tool's name and the arguments as the model wrote them. */
export interface TranscriptToolCall {
  id: string
  name: string
  arguments: string
}

/**
 * A run's transcript: every message of its model conversation after its system messages, in
 * order (its user message as sent, attachments listed; each assistant message, text and tool
 * calls; each tool result as the model saw it; the final answer), secrets redacted. Written as
 * the run goes (each finished tool round, the round a run waits in, its end), kept with the run
 * (not subject to event retention), and replayed to the thread's later runs.
 */
export const runMessages = pgTable(
  'run_messages',
  {
    runId: text('run_id')
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    /** the message's place in the run's conversation, from 0 (its user message) */
    seq: integer('seq').notNull(),
    orgId: text('org_id').notNull(),
    rootRunId: text('root_run_id').notNull(),
    role: text('role').$type<'user' | 'assistant' | 'tool'>().notNull(),
    content: text('content').notNull(),
    /** an assistant message's tool calls */
    toolCalls: jsonb('tool_calls').$type<TranscriptToolCall[]>(),
    /** a tool result's call */
    toolCallId: text('tool_call_id'),
    /** a tool result's tool */
    name: text('name'),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [
    primaryKey({ columns: [t.runId, t.seq] }),
    // a thread's history in one index range
    index('run_messages_thread_idx').on(t.orgId, t.rootRunId, t.runId, t.seq),
    check('run_messages_role_check', sql`${t.role} in ('user', 'assistant', 'tool')`)
  ]
)
