import type { RunSettings } from '../runs/tables.js'
import { sql } from 'drizzle-orm'
import { check, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex } from 'drizzle-orm/pg-core'
import { ts } from '../db/columns.js'
import { PROPOSAL_STATES } from '../../schemas/skills.js'
import { organizations } from '../auth/tables.js'
import { sqlList } from '../db/sql-list.js'

export type SkillProposalState = (typeof PROPOSAL_STATES)[number]
export type SkillSource =
  { kind: 'manual' } | { kind: 'github'; repo: string; path: string; ref: string; commit: string }

/** An Agent Skills SKILL.md, at its current version; its name is unique in the org. */
export const skills = pgTable(
  'skills',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    description: text('description').notNull(),
    instructions: text('instructions').notNull(),
    license: text('license'),
    compatibility: text('compatibility'),
    allowedTools: jsonb('allowed_tools')
      .$type<string[]>()
      .notNull()
      .default(sql`'[]'::jsonb`),
    metadata: jsonb('metadata')
      .$type<Record<string, string>>()
      .notNull()
      .default(sql`'{}'::jsonb`),
    version: integer('version').notNull().default(1),
    source: jsonb('source').$type<SkillSource>().notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [uniqueIndex('skills_org_name_idx').on(t.orgId, t.name), index('skills_org_idx').on(t.orgId, t.id)]
)

/**
 * Learning lane: a SKILL.md proposed by a person or a run, for a new skill or
 * against a version of one. `content_sha256` (of the normalized file) lets a run's proposal
 * be refused when the same content was rejected before.
 */
export const skillProposals = pgTable(
  'skill_proposals',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    skillId: text('skill_id'),
    baseVersion: integer('base_version'),
    skillMd: text('skill_md').notNull(),
    contentSha256: text('content_sha256').notNull(),
    state: text('state').$type<SkillProposalState>().notNull().default('open'),
    runId: text('run_id'),
    createdAt: ts('created_at').notNull().defaultNow(),
    createdBy: text('created_by'),
    decidedAt: ts('decided_at'),
    decidedBy: text('decided_by')
  },
  (t) => [
    index('skill_proposals_org_idx').on(t.orgId, t.id),
    index('skill_proposals_content_idx').on(t.orgId, t.contentSha256),
    check('skill_proposals_state_check', sql`${t.state} in (${sqlList(PROPOSAL_STATES)})`)
  ]
)

/** An ordered list of skill steps, run as one thread. */
export const playbooks = pgTable(
  'playbooks',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    description: text('description').notNull().default(''),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [index('playbooks_org_idx').on(t.orgId, t.id)]
)

/** A playbook's steps; the foreign key keeps a skill a playbook uses from being deleted under it. */
export const playbookSteps = pgTable(
  'playbook_steps',
  {
    playbookId: text('playbook_id')
      .notNull()
      .references(() => playbooks.id, { onDelete: 'cascade' }),
    position: integer('position').notNull(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    skillId: text('skill_id')
      .notNull()
      .references(() => skills.id, { onDelete: 'restrict' }),
    input: text('input').notNull().default('')
  },
  (t) => [primaryKey({ columns: [t.playbookId, t.position] }), index('playbook_steps_skill_idx').on(t.skillId)]
)

export interface PlaybookRunStep {
  skillId: string
  skillVersion: number
  prompt: string
  /**
   * the skill's instructions and the tools its allowed-tools grant (absent in steps stored before they were kept apart)
   */
  instructions?: string | null
  tools?: string[] | undefined
  /** the caller's temperature, output limit and response format, for every step */
  settings?: Omit<RunSettings, 'tools'> | undefined
}

/**
 * One run of a playbook, keyed by its thread (the first step's run). The steps are
 * snapshotted when it starts, so editing the playbook or its skills meanwhile changes
 * nothing for it. `current_step` and `current_run_id` move on in the transaction that
 * finishes the current step's run, together with the insert of the next step's run:
 * exactly once, on any instance, and only for the run the playbook itself started.
 */
export const playbookRuns = pgTable(
  'playbook_runs',
  {
    rootRunId: text('root_run_id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    playbookId: text('playbook_id').notNull(),
    steps: jsonb('steps').$type<PlaybookRunStep[]>().notNull(),
    engine: text('engine').notNull(),
    model: text('model'),
    currentStep: integer('current_step').notNull().default(0),
    currentRunId: text('current_run_id').notNull(),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [index('playbook_runs_org_idx').on(t.orgId, t.playbookId)]
)
