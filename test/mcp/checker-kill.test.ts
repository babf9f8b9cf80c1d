import t from 'tap'
import { claimDueCheck } from '../../src/mcp/servers-repo.js'
import type { Clock } from '../../src/worker-loop.js'
import { buildTestApp, createTestDatabase, secondHandle, signUpWithOrg } from '../helper.js'
import { eventually } from '../runs/sse-client.js'
import { startLocalMcp } from './local-mcp-server.js'

t.test(
  'an instance that dies while it checks a down MCP server loses nothing: the check is leased, another instance takes it once the lease runs out, never before',
  async (t) => {
    let now = new Date('2026-03-02T09:00:00Z')
    const clock: Clock = { now: () => now }
    const timeoutMs = 2000
    const env = { PROVIDER_ALLOW_PRIVATE: 'true', MCP_TIMEOUT_MS: String(timeoutMs) }
    const shared = await createTestDatabase(t)
    const a = await buildTestApp(t, { db: shared, env, clock })
    const owner = await signUpWithOrg(a)
    const headers = { cookie: owner.cookie }
    const mcp = await startLocalMcp(t)
    const created = await a.inject({
      method: 'POST',
      url: '/api/mcp-servers',
      headers,
      payload: { name: 'flaky', url: mcp.url }
    })
    t.equal(created.statusCode, 201, created.body)
    const id: string = created.json().server.id
    const server = async (app = a) =>
      (await app.inject({ method: 'GET', url: '/api/mcp-servers', headers })).json().items.find((s: any) => s.id === id)

    // it fails once: the background check is due later
    mcp.mode = 'fail'
    const failed = await a.inject({ method: 'POST', url: `/api/mcp-servers/${id}/check`, headers })
    t.equal(failed.statusCode, 200, failed.body)
    const due = Date.parse(failed.json().server.nextCheckAt)
    t.ok(due > now.getTime(), 'a check is due later')

    // due: an instance takes the check (the claim its background check makes, with its lease) and dies
    // before it ends: nothing of it is left but the lease on the row
    now = new Date(due + 1)
    // (the lease the service takes: its listing deadline and a minute)
    const leaseMs = timeoutMs + 60_000
    const taken = await claimDueCheck(a.db, now, new Date(now.getTime() + leaseMs))
    t.equal(taken?.id, id, 'the dead instance held this check')
    const leaseUntil = now.getTime() + leaseMs
    t.match(await server(), { ready: false, nextCheckAt: new Date(leaseUntil).toISOString() }, 'the lease outlives it')

    // another instance, on the same database: while the lease holds, the check is nobody else's
    const b = await buildTestApp(t, { db: await secondHandle(t, shared, 5), env, clock })
    now = new Date(leaseUntil - 1000)
    const asked = mcp.requests
    t.equal(
      await claimDueCheck(b.db, now, new Date(now.getTime() + leaseMs)),
      null,
      'not taken before the lease runs out'
    )
    // the lease runs out with the server answering again: B checks it, once, and it is back
    mcp.mode = 'ok'
    now = new Date(leaseUntil + 1)
    b.mcp.checker.wake()
    const back = await eventually(async () => {
      const s = await server(b)
      return s.ready ? s : null
    })
    t.match(back, {
      ready: true,
      lastError: null,
      failingSince: null,
      nextCheckAt: null,
      lastCheckedAt: now.toISOString()
    })
    t.ok(mcp.requests > asked, 'the other instance asked the server')
    t.equal(await claimDueCheck(b.db, now, new Date(now.getTime() + 60_000)), null, 'nothing is left due')
  }
)
