import { pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'

/**
 * An org's secret, sealed (src/secrets/crypto.ts). `sealed` is base64 of
 * nonce ‖ ciphertext ‖ tag; `key_id` names the key that sealed it, so rows under a
 * previous key can be found and sealed again under the current one.
 */
export const secrets = pgTable(
  'secrets',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    keyId: text('key_id').notNull(),
    sealed: text('sealed').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    updatedBy: text('updated_by'),
    lastUsedAt: ts('last_used_at')
  },
  (t) => [primaryKey({ columns: [t.orgId, t.name] })]
)
