import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'uploads',
    families: ['/api/uploads/:id'],
    lists: ['GET /api/uploads'],
    async seed(app, owner) {
      const boundary = 'fixtureboundary'
      const payload = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="fixture.txt"\r\nContent-Type: text/plain\r\n\r\nfixture ${owner.org.id}\r\n--${boundary}--\r\n`
      const res = await app.inject({
        method: 'POST',
        url: '/api/uploads',
        headers: { cookie: owner.cookie, 'content-type': `multipart/form-data; boundary=${boundary}` },
        payload
      })
      return { id: (res.json() as { upload: { id: string } }).upload.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, name, sha256 from uploads where org_id = ${owner.org.id} order by id`)
  },
  {
    name: 'artifacts',
    families: ['/api/artifacts/:id'],
    lists: ['GET /api/artifacts'],
    async seed(app, owner) {
      const headers = { cookie: owner.cookie }
      const created = await app.inject({
        method: 'POST',
        url: '/api/artifacts',
        headers,
        payload: { name: 'fixture.md', content: `fixture ${owner.org.id}` }
      })
      const { artifact } = created.json() as { artifact: { id: string } }
      const proposed = await app.inject({
        method: 'POST',
        url: `/api/artifacts/${artifact.id}/proposals`,
        headers,
        payload: { content: 'proposed', baseVersion: 1 }
      })
      return { id: artifact.id, version: '1', pid: (proposed.json() as { proposal: { id: string } }).proposal.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`
      select a.id, a.version, a.sha256, p.id as proposal, p.state from artifacts a left join artifact_proposals p on p.artifact_id = a.id
      where a.org_id = ${owner.org.id} order by a.id, p.id`
      ),
    body(route) {
      if (route === 'POST /api/artifacts/:id/proposals') return { content: 'attack', baseVersion: 1 }
      if (route === 'PUT /api/artifacts/:id/content') return { content: 'attack' }
      return route.startsWith('POST') ? {} : undefined
    }
  }
]
