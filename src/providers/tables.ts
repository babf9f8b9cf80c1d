import { sql } from 'drizzle-orm'
import { boolean, check, index, jsonb, pgTable, text, uniqueIndex } from 'drizzle-orm/pg-core'
import { PROVIDER_KINDS } from '../../schemas/providers.js'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'
import { sqlList } from '../db/sql-list.js'

/**
 * An org's model provider (OpenAI-compatible or Anthropic). The API key is not here: it is
 * an internal secret (`provider:<id>:api_key`, src/secrets/service.ts `internal`).
 * `models_given` tells whether `models` came with the request (kept as given) or from the
 * provider's own /models at the last successful check (replaced by each one).
 */
export const providers = pgTable(
  'providers',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    /** the protocol: `openai` (chat completions) or `anthropic` (the Messages API) */
    kind: text('kind').$type<(typeof PROVIDER_KINDS)[number]>().notNull().default('openai'),
    baseUrl: text('base_url').notNull(),
    models: jsonb('models').$type<string[]>().notNull().default([]),
    modelsGiven: boolean('models_given').notNull().default(false),
    ready: boolean('ready').notNull().default(false),
    lastCheckedAt: ts('last_checked_at'),
    lastError: text('last_error'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    uniqueIndex('providers_org_name_idx').on(t.orgId, t.name),
    index('providers_org_idx').on(t.orgId, t.id),
    check('providers_kind_check', sql`${t.kind} in (${sqlList(PROVIDER_KINDS)})`)
  ]
)

/** The model an org's admin chose for runs, chats and automations that name none. */
export const modelDefaults = pgTable('model_defaults', {
  orgId: text('org_id')
    .primaryKey()
    .references(() => organizations.id, { onDelete: 'cascade' }),
  model: text('model').notNull(),
  updatedAt: ts('updated_at').notNull().defaultNow(),
  updatedBy: text('updated_by')
})
