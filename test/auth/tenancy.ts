import { sql } from 'drizzle-orm'
import { mintKey } from '../helper.js'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'api keys',
    families: ['/api/keys/:id'],
    lists: ['GET /api/keys'],
    async seed(app, owner) {
      const { id } = await mintKey(app, owner.cookie, 'fixture key')
      return { id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, name, revoked_at from api_keys where org_id = ${owner.org.id} order by id`)
  },
  {
    name: 'organizations and members',
    families: ['/api/auth/organizations/:id'],
    lists: ['GET /api/auth/organizations', 'GET /api/auth/session', 'GET /api/auth/whoami'],
    async seed(_app, owner) {
      return { orgId: owner.org.id, userId: owner.user.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select user_id, role from members where org_id = ${owner.org.id} order by user_id`),
    body(route, attacker) {
      if (route.startsWith('POST')) return { email: attacker.user.email, role: 'owner' }
      if (route.startsWith('PATCH')) return { role: 'member' }
      return undefined
    }
  }
]
