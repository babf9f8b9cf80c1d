import { bigint, integer, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'

const counts = {
  runs: integer('runs').notNull(),
  succeeded: integer('succeeded').notNull(),
  failed: integer('failed').notNull(),
  inputTokens: bigint('input_tokens', { mode: 'number' }).notNull(),
  outputTokens: bigint('output_tokens', { mode: 'number' }).notNull(),
  durationMs: bigint('duration_ms', { mode: 'number' }).notNull()
}

/**
 * Contract 11's fleet usage, kept as runs finish (a trigger on `runs`, migration
 * 0013_usage_rollup): one row per org and quarter hour of `finished_at` (UTC). A quarter
 * hour never straddles a local midnight of any time zone in use (every offset is a
 * multiple of 15 minutes), so the rows add up to exact local days of any `tz`, 23- and
 * 25-hour days included: a year is at most 35,040 rows, whatever the runs.
 */
export const usageSlots = pgTable('usage_slots', {
  orgId: text('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
  slot: ts('slot').notNull(),
  ...counts
}, (t) => [primaryKey({ columns: [t.orgId, t.slot] })])

/**
 * The same by engine, model and user (`groupBy`): one row per org, quarter hour and
 * combination that ran in it. `model` and `user_id` are '' for none.
 */
export const usageSlotGroups = pgTable('usage_slot_groups', {
  orgId: text('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
  slot: ts('slot').notNull(),
  engine: text('engine').notNull(),
  model: text('model').notNull(),
  userId: text('user_id').notNull(),
  ...counts
}, (t) => [primaryKey({ columns: [t.orgId, t.slot, t.engine, t.model, t.userId] })])
