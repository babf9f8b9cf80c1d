import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'projects',
    families: ['/api/projects/:id'],
    lists: ['GET /api/projects'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/projects',
        headers: { cookie: owner.cookie },
        payload: { name: `fixture ${owner.org.id}` }
      })
      return { id: (res.json() as { project: { id: string } }).project.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, name, archived_at from projects where org_id = ${owner.org.id} order by id`),
    body: (route) => (route === 'PATCH /api/projects/:id' ? { name: 'attack', archived: true } : undefined)
  },
  {
    name: 'tasks',
    families: ['/api/tasks/:id'],
    lists: ['GET /api/tasks'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/tasks',
        headers: { cookie: owner.cookie },
        payload: { title: `fixture ${owner.org.id}` }
      })
      return { id: (res.json() as { task: { id: string } }).task.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select id, title, status, position, revision, run_id from tasks where org_id = ${owner.org.id} order by id`
      ),
    body: (route) =>
      route === 'PATCH /api/tasks/:id'
        ? { title: 'attack', revision: 1 }
        : route === 'POST /api/tasks/:id/move'
          ? { status: 'done', revision: 1 }
          : route.startsWith('POST')
            ? {}
            : undefined
  }
]
