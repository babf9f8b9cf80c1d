import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'knowledge records',
    families: ['/api/knowledge/:id'],
    lists: [
      'GET /api/knowledge',
      'GET /api/knowledge/search?q=fixture',
      'GET /api/knowledge/search?q=fixture&mode=semantic'
    ],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge',
        headers: { cookie: owner.cookie },
        payload: { title: 'fixture', body: `fixture ${owner.org.id}`, tags: ['fixture'] }
      })
      return { id: (res.json() as { record: { id: string } }).record.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`
      select r.id, r.version, r.title, r.body, (select count(*)::int from knowledge_record_history h where h.org_id = r.org_id and h.record_id = r.id) as history
      from knowledge_records r where r.org_id = ${owner.org.id} order by r.id`
      ),
    body: (route) => (route === 'PATCH /api/knowledge/:id' ? { title: 'attack', version: 1 } : undefined)
  },
  {
    name: 'knowledge documents',
    families: ['/api/knowledge/documents/:id'],
    lists: ['GET /api/knowledge/documents'],
    async seed(app, owner) {
      const boundary = 'fixtureboundary'
      const payload = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="fixture.md"\r\nContent-Type: text/markdown\r\n\r\n# Fixture\n\nfixture ${owner.org.id}\r\n--${boundary}--\r\n`
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge/documents',
        headers: { cookie: owner.cookie, 'content-type': `multipart/form-data; boundary=${boundary}` },
        payload
      })
      const { document } = res.json() as { document: { id: string } }
      // failed, so that a retry by the owner would be allowed: the attacker's must still be a 404
      await app.db.execute(
        sql`update knowledge_documents set state = 'failed', last_error = 'fixture' where id = ${document.id}`
      )
      return { id: document.id }
    },
    // the worker may be extracting while the walk runs: only what the attacker could change
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select id, name, sha256, attempts from knowledge_documents where org_id = ${owner.org.id} order by id`
      ),
    body: (route) => (route.startsWith('POST') ? {} : undefined)
  },
  {
    name: 'knowledge drafts',
    families: ['/api/knowledge/drafts/:id'],
    lists: ['GET /api/knowledge/drafts'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge/drafts',
        headers: { cookie: owner.cookie },
        payload: { title: 'fixture draft', body: `fixture ${owner.org.id}` }
      })
      return { id: (res.json() as { draft: { id: string } }).draft.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, state, title from knowledge_drafts where org_id = ${owner.org.id} order by id`),
    body: (route) => (route.startsWith('POST') ? {} : undefined)
  }
]
