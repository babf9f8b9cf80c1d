import type { Static } from 'typebox'
import type { PromptTarget as PromptTargetSchema } from '../../schemas/automations.js'
import { sql } from 'drizzle-orm'
import { boolean, check, index, jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { CATCH_UPS } from '../../schemas/automations.js'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'
import { sqlList } from '../db/sql-list.js'
import { playbooks, skills } from '../skills/tables.js'

export type CatchUp = (typeof CATCH_UPS)[number]

/**
 * A run target: a prompt (with the run's agent options), a skill run or a playbook run.
 */
export type AutomationTarget =
  | ({ prompt: string; engine?: string | undefined; model?: string | undefined } & Static<typeof PromptTargetSchema>)
  | { skillId: string; input?: string | undefined }
  | { playbookId: string; input?: string | undefined }

/**
 * A scheduled automation. `next_fire_at` is its next tick (null while
 * disabled); the scheduler claims rows whose tick has come. `skill_id` / `playbook_id`
 * repeat the target's id so a skill or playbook an automation runs cannot be deleted
 * (NO ACTION, checked at the end of the statement, so deleting the org still cascades).
 */
export const automations = pgTable(
  'automations',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    cron: text('cron').notNull(),
    timezone: text('timezone').notNull(),
    target: jsonb('target').$type<AutomationTarget>().notNull(),
    skillId: text('skill_id').references(() => skills.id, { onDelete: 'no action' }),
    playbookId: text('playbook_id').references(() => playbooks.id, { onDelete: 'no action' }),
    enabled: boolean('enabled').notNull().default(true),
    catchUp: text('catch_up').$type<CatchUp>().notNull().default('latest'),
    nextFireAt: ts('next_fire_at'),
    lastFiredAt: ts('last_fired_at'),
    lastRunId: text('last_run_id'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    index('automations_org_idx').on(t.orgId, t.id),
    // the scheduler's one query: enabled rows by tick
    index('automations_due_idx')
      .on(t.nextFireAt)
      .where(sql`enabled and next_fire_at is not null`),
    check('automations_catch_up_check', sql`${t.catchUp} in (${sqlList(CATCH_UPS)})`)
  ]
)

/**
 * One row per fired tick, written in the transaction that inserts its run: the primary
 * key makes a tick fire once across every instance and crash.
 */
export const automationFires = pgTable(
  'automation_fires',
  {
    automationId: text('automation_id')
      .notNull()
      .references(() => automations.id, { onDelete: 'cascade' }),
    scheduledFor: ts('scheduled_for').notNull(),
    orgId: text('org_id').notNull(),
    firedAt: ts('fired_at').notNull().defaultNow(),
    runId: text('run_id').notNull()
  },
  (t) => [primaryKey({ columns: [t.automationId, t.scheduledFor] })]
)
