import { sql } from 'drizzle-orm'
import { newId } from '../../src/db/ids.js'
import { providers } from '../../src/providers/tables.js'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    // seeded in the database: the walk's app refuses private provider addresses, and the
    // attacker's calls must be 404s before any request to the provider could be made
    name: 'model providers',
    families: ['/api/providers/:id'],
    lists: ['GET /api/providers', 'GET /api/models', 'GET /api/models/embedding'],
    async seed(app, owner) {
      const id = newId()
      const model = `model-of-${owner.org.id}`
      await app.db.insert(providers).values({
        id,
        orgId: owner.org.id,
        name: `fixture ${owner.org.id}`,
        baseUrl: 'https://provider.example.test/v1',
        models: [model],
        modelsGiven: true,
        ready: true
      })
      await app.secrets.internal.put(owner.org.id, `provider:${id}:api_key`, `key of ${owner.org.id}`)
      return { id, model }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select id, name, base_url, models, ready, last_error, last_checked_at from providers where org_id = ${owner.org.id} order by id`
      ),
      await rows(
        app,
        sql`select name, sealed from secrets where org_id = ${owner.org.id} and name like 'cairn:provider:%' order by name`
      )
    ]
  }
]
