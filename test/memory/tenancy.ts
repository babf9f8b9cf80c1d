import { sql } from 'drizzle-orm'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'memory hub',
    families: ['/api/memory/item/:id', '/api/memory/captures/:id'],
    lists: [
      'GET /api/memory/browse',
      'GET /api/memory/search?q=fixture',
      'GET /api/memory/search?q=fixture&mode=semantic',
      'GET /api/memory/captures',
      'GET /api/memory/recalls'
    ],
    async seed(app, owner) {
      // a real run: echo recalls, then captures the sentence with "remember", and the
      // outbox delivers it into the org pool
      const res = await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: `Remember the fixture door of ${owner.org.id}.`, engine: 'echo' }
      })
      const { run } = res.json() as { run: { id: string } }
      for (let i = 0; i < 200; i++) {
        const browse = await app.inject({ method: 'GET', url: '/api/memory/browse', headers: { cookie: owner.cookie } })
        const item = (browse.json() as { items: Array<{ id: string; sourceRunId: string | null }> }).items.find(
          (it) => it.sourceRunId === run.id
        )
        if (item) return { id: item.id, runId: run.id }
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      throw new Error('the fixture fact was never delivered')
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select i.id, i.content from memory_items i join memory_pools p on p.id = i.pool_id where p.org_id = ${owner.org.id} order by i.id`
      ),
      await rows(
        app,
        sql`select run_id, state, attempts from memory_captures where org_id = ${owner.org.id} order by run_id`
      ),
      await rows(
        app,
        sql`select kind, item_id, state, attempts from embeddings where org_id = ${owner.org.id} order by kind, item_id`
      )
    ],
    body(route) {
      if (route.startsWith('PATCH')) return { content: 'overwritten by another org' }
      if (route.endsWith('/resolve')) return { resolution: 'discard' }
      return route.startsWith('POST') ? {} : undefined
    }
  }
]
