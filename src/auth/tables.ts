import { sql } from 'drizzle-orm'
import { check, index, integer, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

export const ROLES = ['owner', 'admin', 'member'] as const
export type Role = (typeof ROLES)[number]

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()

export const users = pgTable(
  'users',
  {
    id: text('id').primaryKey(),
    /** stored lower-cased; unique */
    email: text('email').notNull(),
    name: text('name').notNull(),
    /** argon2id PHC string; null for the dev-org fallback user, who can never sign in */
    passwordHash: text('password_hash'),
    createdAt: createdAt()
  },
  (t) => [uniqueIndex('users_email_key').on(t.email)]
)

export const organizations = pgTable(
  'organizations',
  {
    id: text('id').primaryKey(),
    name: text('name').notNull(),
    slug: text('slug').notNull(),
    createdAt: createdAt()
  },
  (t) => [uniqueIndex('organizations_slug_key').on(t.slug)]
)

export const members = pgTable(
  'members',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    role: text('role').$type<Role>().notNull(),
    createdAt: createdAt()
  },
  (t) => [
    primaryKey({ columns: [t.orgId, t.userId] }),
    index('members_user_first_idx').on(t.userId, t.createdAt, t.orgId),
    check('members_role_check', sql`${t.role} in ('owner', 'admin', 'member')`)
  ]
)

const nullableTime = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * Browser sessions (Lucia's design): the row id is the SHA-256 (hex) of the cookie's
 * token, so a database dump holds no usable session. Deleting the row ends the session.
 */
export const sessions = pgTable(
  'sessions',
  {
    id: text('id').primaryKey(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    /** the org chosen with POST /api/auth/organizations/active; null: the first membership */
    activeOrgId: text('active_org_id').references(() => organizations.id, { onDelete: 'set null' }),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    createdAt: createdAt()
  },
  (t) => [index('sessions_user_idx').on(t.userId)]
)

/** Org API keys: only the SHA-256 (hex) of the key is kept, plus its last four characters. */
export const apiKeys = pgTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    keyHash: text('key_hash').notNull(),
    last4: text('last4').notNull(),
    createdBy: text('created_by').references(() => users.id, { onDelete: 'set null' }),
    createdAt: createdAt(),
    lastUsedAt: nullableTime('last_used_at'),
    revokedAt: nullableTime('revoked_at')
  },
  (t) => [uniqueIndex('api_keys_key_hash_key').on(t.keyHash), index('api_keys_org_idx').on(t.orgId, t.createdAt)]
)

/**
 * The sign-in and sign-up brakes' counters, shared by every instance (rate-limiter-flexible's
 * RateLimiterDrizzle store: its column names). `key` is the limiter's prefix and the
 * client address or the normalized email; `expire` ends the window.
 */
export const authRateLimits = pgTable(
  'auth_rate_limits',
  {
    key: text('key').primaryKey(),
    points: integer('points').notNull().default(0),
    expire: timestamp('expire', { withTimezone: true, mode: 'date' })
  },
  (t) => [index('auth_rate_limits_expire_idx').on(t.expire)]
)
