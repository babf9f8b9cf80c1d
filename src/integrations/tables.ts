import { jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'

/** The integrations an org can connect. */
export const INTEGRATION_KINDS = ['github', 'slack'] as const
export type IntegrationKind = (typeof INTEGRATION_KINDS)[number]

/**
 * An org's connection to GitHub or Slack, one row per kind while connected.
 * Credentials are not here: they are internal secrets (src/secrets/service.ts `internal`),
 * sealed like the org's own. `settings` holds what a kind needs besides them (Slack's
 * team id, the GitHub login's id); `account` is what GET /api/integrations shows.
 */
export const integrations = pgTable(
  'integrations',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    kind: text('kind').$type<IntegrationKind>().notNull(),
    account: text('account').notNull(),
    settings: jsonb('settings').$type<Record<string, unknown>>().notNull().default({}),
    connectedAt: ts('connected_at').notNull().defaultNow(),
    connectedBy: text('connected_by'),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    lastError: text('last_error')
  },
  (t) => [primaryKey({ columns: [t.orgId, t.kind] })]
)
