import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'runs and threads',
    families: ['/api/runs/:id', '/api/threads/:id'],
    lists: [
      'GET /api/runs',
      'GET /api/threads',
      'GET /api/dashboard',
      'GET /api/usage?groupBy=user',
      'GET /api/integrations'
    ],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'tenant fixture' }
      })
      const { run } = res.json() as { run: { id: string; rootRunId: string } }
      return { id: run.id, rootRunId: run.rootRunId }
    },
    // the run executes meanwhile, so its status moves on its own; a cancel would show in cancel_requested
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select id, root_run_id, prompt, cancel_requested from runs where org_id = ${owner.org.id} order by id`
      ),
    body(route) {
      return route.startsWith('POST') ? {} : undefined
    }
  }
]
