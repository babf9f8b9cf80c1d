import { sql } from 'drizzle-orm'
import { check, index, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { APPROVAL_STATUSES, TOOL_MODES } from '../../schemas/runtime.js'
import { sqlList } from '../db/sql-list.js'

export type ToolMode = (typeof TOOL_MODES)[number]

export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number]

/** An org's choice per tool; a tool without a row uses its built-in default. */
export const toolPolicies = pgTable('tool_policies', {
  orgId: text('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
  tool: text('tool').notNull(),
  mode: text('mode').$type<ToolMode>().notNull(),
  updatedBy: text('updated_by'),
  updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()
}, (t) => [
  primaryKey({ columns: [t.orgId, t.tool] }),
  check('tool_policies_mode_check', sql`${t.mode} in (${sqlList(TOOL_MODES)})`)
])

/**
 * A tool call waiting for a person. The waiting gateway (on whichever instance holds
 * the call) re-reads the row, so a decision made on any instance wakes it.
 * `run_id`/`root_run_id` reference the runs group's `runs` rows (no FK on this branch).
 */
export const toolApprovals = pgTable('tool_approvals', {
  id: text('id').primaryKey(),
  orgId: text('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
  runId: text('run_id').notNull(),
  rootRunId: text('root_run_id').notNull(),
  callId: text('call_id').notNull(),
  tool: text('tool').notNull(),
  arguments: jsonb('arguments').$type<Record<string, unknown>>().notNull(),
  status: text('status').$type<ApprovalStatus>().notNull().default('pending'),
  decidedBy: text('decided_by'),
  decidedAt: timestamp('decided_at', { withTimezone: true, mode: 'date' }),
  expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
  createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()
}, (t) => [
  index('tool_approvals_run_idx').on(t.orgId, t.runId, t.id),
  check('tool_approvals_status_check', sql`${t.status} in (${sqlList(APPROVAL_STATUSES)})`)
])
