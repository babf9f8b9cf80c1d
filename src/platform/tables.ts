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
 * Fleet usage, kept as runs finish (a trigger on `runs`, migrations
 * 0013_usage_rollup and 0017_usage_hours) at two grains of `finished_at` (UTC):
 *
 * - the hour (`usage_hours`, and `usage_hour_groups` by engine, model and user): a local
 *   day of a zone whose midnights fall on whole UTC hours (most zones) is 23 to 25 of
 *   these rows, so a year is at most 8,784 rows whatever the runs;
 * - the quarter hour, by group (`usage_slot_groups`): every offset in use is a multiple of
 *   15 minutes, so a midnight inside an hour (+05:30, +05:45, -03:30…) splits that hour
 *   at a quarter; only those hours are read at this grain.
 *
 * Together they add up to exact local days of any `tz`, 23- and 25-hour days included.
 * `model` and `user_id` are '' for none.
 */
export const usageHours = pgTable(
  'usage_hours',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    hour: ts('hour').notNull(),
    ...counts
  },
  (t) => [primaryKey({ columns: [t.orgId, t.hour] })]
)

/** `usage_hours` by engine, model and user: one row per org, hour and combination that ran in it. */
export const usageHourGroups = pgTable(
  'usage_hour_groups',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    hour: ts('hour').notNull(),
    engine: text('engine').notNull(),
    model: text('model').notNull(),
    userId: text('user_id').notNull(),
    ...counts
  },
  (t) => [primaryKey({ columns: [t.orgId, t.hour, t.engine, t.model, t.userId] })]
)

/** The quarter hours, by engine, model and user: read only for the hours a midnight splits. */
export const usageSlotGroups = pgTable(
  'usage_slot_groups',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    slot: ts('slot').notNull(),
    engine: text('engine').notNull(),
    model: text('model').notNull(),
    userId: text('user_id').notNull(),
    ...counts
  },
  (t) => [primaryKey({ columns: [t.orgId, t.slot, t.engine, t.model, t.userId] })]
)
