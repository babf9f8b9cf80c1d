import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'automations',
    families: ['/api/automations/:id'],
    lists: ['GET /api/automations'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/automations',
        headers: { cookie: owner.cookie },
        payload: {
          name: `fixture ${owner.org.id}`,
          cron: '0 3 * * *',
          target: { prompt: `automation of ${owner.org.id}` }
        }
      })
      return { id: (res.json() as { automation: { id: string } }).automation.id }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select id, name, cron, enabled, next_fire_at from automations where org_id = ${owner.org.id} order by id`
      ),
      await rows(app, sql`select count(*)::int as n from runs where org_id = ${owner.org.id} and origin = 'automation'`)
    ],
    body: (route) =>
      route.startsWith('PATCH') ? { enabled: false, name: 'attack' } : route.startsWith('POST') ? {} : undefined
  }
]
