import { sql } from 'drizzle-orm'
import { bigint, check, index, integer, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { APPROVAL_STATUSES, TOOL_MODES } from '../../schemas/runtime.js'
import { sqlList } from '../db/sql-list.js'

export type ToolMode = (typeof TOOL_MODES)[number]

export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number]

/** An org's choice per tool; a tool without a row uses its built-in default. */
export const toolPolicies = pgTable(
  'tool_policies',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    tool: text('tool').notNull(),
    mode: text('mode').$type<ToolMode>().notNull(),
    updatedBy: text('updated_by'),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()
  },
  (t) => [
    primaryKey({ columns: [t.orgId, t.tool] }),
    check('tool_policies_mode_check', sql`${t.mode} in (${sqlList(TOOL_MODES)})`)
  ]
)

/**
 * A tool call waiting for a person. Its run waits without a worker (`requires_action`);
 * a decision, on any instance, lets the run go on (runs.resume_at), and the gateway reads
 * the decision from this row when the run asks again.
 * `run_id`/`root_run_id` reference the runs group's `runs` rows (no FK on this branch).
 */
export const toolApprovals = pgTable(
  'tool_approvals',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    runId: text('run_id').notNull(),
    rootRunId: text('root_run_id').notNull(),
    callId: text('call_id').notNull(),
    tool: text('tool').notNull(),
    arguments: jsonb('arguments').$type<Record<string, unknown>>().notNull(),
    status: text('status').$type<ApprovalStatus>().notNull().default('pending'),
    decidedBy: text('decided_by'),
    decidedAt: timestamp('decided_at', { withTimezone: true, mode: 'date' }),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /** the W3C `traceparent` of the tool call's span that asked: the wait for the decision is its child span */
    traceparent: text('traceparent')
  },
  (t) => [
    index('tool_approvals_run_idx').on(t.orgId, t.runId, t.id),
    // GET /metrics counts the approvals waiting, whatever the table's size
    index('tool_approvals_pending_idx')
      .on(t.expiresAt)
      .where(sql`${t.status} = 'pending'`),
    check('tool_approvals_status_check', sql`${t.status} in (${sqlList(APPROVAL_STATUSES)})`)
  ]
)

/**
 * A thread's sandbox workspace as every instance sees it: who holds it now (an instance,
 * until `lease_expires_at`; renewed while it is used) and the archive of its last save
 * (a blob of the org, `sha256`), which `revision` counts. The instance that next runs or
 * opens a terminal in the thread takes the lease and restores that archive unless its own
 * disk already has this revision. No row: nothing was saved yet (an empty workspace).
 * `thread_id` is the runs group's root run id (no FK: the sweeper drops rows of threads
 * that no longer exist, and the blob sweeper then their archives).
 */
export const threadWorkspaces = pgTable(
  'thread_workspaces',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    threadId: text('thread_id').notNull(),
    holder: text('holder'),
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true, mode: 'date' }),
    revision: integer('revision').notNull().default(0),
    sha256: text('sha256'),
    bytes: bigint('bytes', { mode: 'number' }),
    savedAt: timestamp('saved_at', { withTimezone: true, mode: 'date' })
  },
  (t) => [
    primaryKey({ columns: [t.orgId, t.threadId] }),
    index('thread_workspaces_holder_idx').on(t.holder),
    index('thread_workspaces_blob_idx').on(t.orgId, t.sha256)
  ]
)

/**
 * One attempt at executing a tool call, stored as it starts and again as it ends, each a
 * statement of its own (committed at once, so every instance sees it). A run handed back
 * while a call ran goes on elsewhere from its last checkpoint: a call found started but never
 * ended is not executed again, since it may have partly run (its model is told so, or, for a
 * call a person approved, a person is asked again); one that ended gives back what it answered.
 * `round` is the model round that asked (the same call id may come back in a later round).
 * `approval_id` is the decision that let this attempt run (null: its tool needs none); a new
 * decision starts a new attempt. `run_id` references the runs group's `runs` rows (no FK, like
 * `tool_approvals`).
 */
export const toolCallAttempts = pgTable(
  'tool_call_attempts',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    runId: text('run_id').notNull(),
    round: integer('round').notNull(),
    callId: text('call_id').notNull(),
    approvalId: text('approval_id'),
    startedAt: timestamp('started_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /** null while the call runs, or when it never ended (its instance stopped under it) */
    endedAt: timestamp('ended_at', { withTimezone: true, mode: 'date' }),
    /** the result's status and the text the model was given (redacted and bounded), once ended */
    status: text('status'),
    content: text('content')
  },
  (t) => [
    primaryKey({ columns: [t.runId, t.round, t.callId] }),
    index('tool_call_attempts_org_idx').on(t.orgId),
    // the runs sweeper deletes attempts by age every hour (`pruneAttempts`): a range on this
    // instead of reading the whole table
    index('tool_call_attempts_started_idx').on(t.startedAt)
  ]
)
