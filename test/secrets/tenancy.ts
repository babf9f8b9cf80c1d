import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    // a secret's name is the org's own namespace, not an id: the attacker's DELETE of the
    // victim's name finds nothing of its own (404) and the victim's secret stays
    name: 'secrets',
    families: ['/api/secrets/:id'],
    // its path parameter names no tenant resource: the org always comes from the principal
    notIds: {
      'PUT /api/secrets/:name':
        "sets a secret of the caller's own org under that name (the walk checks the victim's secret stays)"
    },
    lists: ['GET /api/secrets'],
    async seed(app, owner) {
      const name = `FIXTURE_${owner.org.id.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`
      const res = await app.inject({
        method: 'PUT',
        url: `/api/secrets/${name}`,
        headers: { cookie: owner.cookie },
        payload: { value: `value of ${owner.org.id}` }
      })
      if (res.statusCode !== 201) throw new Error(`secret fixture: ${res.statusCode} ${res.body}`)
      return { name }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select name, sealed, key_id from secrets where org_id = ${owner.org.id} order by name`)
  }
]
