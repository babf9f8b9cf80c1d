import type { Db } from '../db/client.js'
import { members, organizations, users } from './tables.js'

/**
 * The seeded dev org and its fallback user. With ALLOW_DEV_ORG on, anonymous requests
 * act here (principal kind "dev"). The user has no password, so nobody can sign in as
 * it, and it never owns a personal memory pool.
 */
export const DEV_ORG = { id: '00000000-0000-7000-8000-00000000d001', name: 'Dev org', slug: 'dev' } as const
export const DEV_USER = {
  id: '00000000-0000-7000-8000-00000000d002',
  email: 'dev@cairn.invalid',
  name: 'Dev user'
} as const

export async function seedDevOrg(db: Db): Promise<void> {
  await db.insert(organizations).values(DEV_ORG).onConflictDoNothing()
  await db
    .insert(users)
    .values({ ...DEV_USER, passwordHash: null })
    .onConflictDoNothing()
  await db.insert(members).values({ orgId: DEV_ORG.id, userId: DEV_USER.id, role: 'owner' }).onConflictDoNothing()
}
