import { sql } from 'drizzle-orm'
import { newId } from '../../src/db/ids.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    name: 'agent runtime',
    families: [
      '/api/runs/:id/approvals',
      '/api/runs/:id/terminal',
      '/api/desktop-proxy/:id',
      '/api/tools/policies/:id'
    ],
    // its path parameter names no tenant resource: the org always comes from the principal
    notIds: { 'PUT /api/tools/policies/:tool': "a tool's name, not an id: it sets the caller's own org's policy" },
    lists: ['GET /api/tools/policies'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'runtime fixture' }
      })
      const { run } = res.json() as { run: { id: string; rootRunId: string } }
      // a pending approval as a waiting tool call leaves it (no model is needed to make one)
      const approvalId = newId()
      await app.db.insert(toolApprovals).values({
        id: approvalId,
        orgId: owner.org.id,
        runId: run.id,
        rootRunId: run.rootRunId,
        callId: 'call_fixture',
        tool: 'shell',
        arguments: { command: 'true' },
        expiresAt: new Date(Date.now() + 3_600_000)
      })
      return { id: run.id, approvalId, threadId: run.rootRunId }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, status, decided_by from tool_approvals where org_id = ${owner.org.id} order by id`),
    body(route) {
      return route.startsWith('POST') ? { decision: 'approve' } : undefined
    }
  }
]
