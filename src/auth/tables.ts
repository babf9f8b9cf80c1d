import { sql } from 'drizzle-orm'
import { check, index, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

export const ROLES = ['owner', 'admin', 'member'] as const
export type Role = (typeof ROLES)[number]

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()

export const users = pgTable('users', {
  id: text('id').primaryKey(),
  /** stored lower-cased; unique */
  email: text('email').notNull(),
  name: text('name').notNull(),
  /** argon2id PHC string; null for the dev-org fallback user, who can never sign in */
  passwordHash: text('password_hash'),
  createdAt: createdAt()
}, (t) => [uniqueIndex('users_email_key').on(t.email)])

export const organizations = pgTable('organizations', {
  id: text('id').primaryKey(),
  name: text('name').notNull(),
  slug: text('slug').notNull(),
  createdAt: createdAt()
}, (t) => [uniqueIndex('organizations_slug_key').on(t.slug)])

export const members = pgTable('members', {
  orgId: text('org_id').notNull().references(() => organizations.id, { onDelete: 'cascade' }),
  userId: text('user_id').notNull().references(() => users.id, { onDelete: 'cascade' }),
  role: text('role').$type<Role>().notNull(),
  createdAt: createdAt()
}, (t) => [
  primaryKey({ columns: [t.orgId, t.userId] }),
  index('members_user_first_idx').on(t.userId, t.createdAt, t.orgId),
  check('members_role_check', sql`${t.role} in ('owner', 'admin', 'member')`)
])
