import { index, integer, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { ts } from '../../src/db/columns.js'

/** One row per (org, route, key), kept 24 hours. */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    orgId: text('org_id').notNull(),
    route: text('route').notNull(),
    key: text('key').notNull(),
    fingerprint: text('fingerprint').notNull(),
    /** `in_flight` while the first request works, `done` once its answer is stored */
    state: text('state').$type<'in_flight' | 'done'>().notNull(),
    lockToken: text('lock_token'),
    lockedUntil: ts('locked_until'),
    responseStatus: integer('response_status'),
    responseType: text('response_type'),
    responseBody: text('response_body'),
    createdAt: ts('created_at').notNull().defaultNow(),
    expiresAt: ts('expires_at').notNull()
  },
  (t) => [primaryKey({ columns: [t.orgId, t.route, t.key] }), index('idempotency_keys_expires_idx').on(t.expiresAt)]
)
