import { randomBytes } from 'node:crypto'
import { networkInterfaces } from 'node:os'
import { eq, sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { mcpServers } from '../../src/mcp/tables.js'
import { toolPolicies } from '../../src/runtime/tables.js'
import { addMember, mintKey, signUp, signUpWithOrg, type Teardown } from '../helper.js'
import { buildMcpApp } from './group.js'
import { finishedRun, storedEventsOf } from '../runs/run-helpers.js'
import { eventually } from '../runs/sse-client.js'
import { startToolModel } from '../runs/tool-model.js'
import type { Clock } from '../../src/worker-loop.js'
import { startLocalMcp } from './local-mcp-server.js'
import { listening } from './mcp-client.js'

async function setup(t: Teardown, env: Record<string, string> = {}, clock?: Clock) {
  const upstream = await startToolModel(t)
  const app = await buildMcpApp(t, {
    ...(clock ? { clock } : {}),
    env: {
      OPENAI_BASE_URL: upstream.url,
      MODELS: 'tool-model',
      RUN_POLL_MS: '50',
      SANDBOX_UNCONFINED: 'true',
      PROVIDER_ALLOW_PRIVATE: 'true',
      SECRETS_KEY: randomBytes(32).toString('base64'),
      MCP_TIMEOUT_MS: '3000',
      ...env
    }
  })
  const owner = await signUpWithOrg(app)
  return { app, upstream, owner, headers: { cookie: owner.cookie } }
}

t.test(
  'an admin connects a server (headers sealed, never returned); its tools reach runs through the gateway: approval, events, failure',
  async (t) => {
    const { app, upstream, owner, headers } = await setup(t)
    const mcp = await startLocalMcp(t)

    const created = await app.inject({
      method: 'POST',
      url: '/api/mcp-servers',
      headers,
      payload: { name: 'local', url: mcp.url, headers: { 'x-api-key': 'sekret-header-value' } }
    })
    t.equal(created.statusCode, 201, created.body)
    const server = created.json().server
    t.match(server, { name: 'local', url: mcp.url, ready: true, lastError: null, headerNames: ['x-api-key'] })
    t.same(
      server.tools.map((tool: any) => tool.name),
      ['record', 'fail', 'slow']
    )
    t.notMatch(created.body, /sekret-header-value/)
    const sealed = rowsOf<{ sealed: string }>(
      await app.db.execute(
        sql`select sealed from secrets where org_id = ${owner.org.id} and name = ${`cairn:mcp:${server.id}:header:x-api-key`}`
      )
    )
    t.equal(sealed.length, 1)
    t.notMatch(sealed[0]!.sealed, /sekret/)
    const listed = await app.inject({ method: 'GET', url: '/api/mcp-servers', headers })
    t.equal(listed.statusCode, 200)
    t.notMatch(listed.body, /sekret-header-value/)
    t.same(
      listed.json().items.map((s: any) => s.id),
      [server.id]
    )

    // refusals: duplicate name, bad name, metadata address, a key, a member
    t.equal(
      (await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name: 'local', url: mcp.url } }))
        .statusCode,
      409
    )
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: '/api/mcp-servers',
          headers,
          payload: { name: 'Bad Name', url: mcp.url }
        })
      ).json().error,
      'validation_failed'
    )
    const metadata = await app.inject({
      method: 'POST',
      url: '/api/mcp-servers',
      headers,
      payload: { name: 'meta', url: 'http://169.254.169.254/mcp' }
    })
    t.equal(metadata.statusCode, 400)
    t.match(metadata.json(), { error: 'validation_failed', details: [{ path: '/body/url' }] })
    const key = await mintKey(app, owner.cookie)
    t.equal(
      (await app.inject({ method: 'GET', url: '/api/mcp-servers', headers: { authorization: key.authorization } }))
        .statusCode,
      401
    )
    const member = await signUp(app)
    await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: '/api/mcp-servers',
          headers: { cookie: member.cookie },
          payload: { name: 'mine', url: mcp.url }
        })
      ).json().error,
      'organization_admin_required'
    )

    // `fail` runs without a person (the org's policy, set through the API); `record` needs one (the default)
    const policies = (await app.inject({ method: 'GET', url: '/api/tools/policies', headers })).json().items
    t.same(
      policies.filter((p: any) => p.tool.startsWith('mcp__')).map((p: any) => [p.tool, p.mode, p.isDefault]),
      [
        ['mcp__local__record', 'approve', true],
        ['mcp__local__fail', 'approve', true],
        ['mcp__local__slow', 'approve', true]
      ],
      'its tools are listed, approve by default'
    )
    const setAuto = await app.inject({
      method: 'PUT',
      url: '/api/tools/policies/mcp__local__fail',
      headers,
      payload: { mode: 'auto' }
    })
    t.equal(setAuto.statusCode, 200, setAuto.body)
    t.match(setAuto.json(), { tool: 'mcp__local__fail', mode: 'auto', isDefault: false })
    const [stored] = await app.db.select().from(toolPolicies).where(eq(toolPolicies.tool, 'mcp__local__fail'))
    t.match(stored, { orgId: owner.org.id, mode: 'auto', updatedBy: owner.user.id })
    const unlisted = await app.inject({
      method: 'PUT',
      url: '/api/tools/policies/mcp__local__nothing',
      headers,
      payload: { mode: 'auto' }
    })
    t.equal(unlisted.statusCode, 404, 'a tool its server did not list')
    t.equal(
      (
        await app.inject({
          method: 'PUT',
          url: '/api/tools/policies/mcp__other__record',
          headers,
          payload: { mode: 'auto' }
        })
      ).statusCode,
      404,
      'no such server'
    )
    t.match(
      (
        await app.inject({
          method: 'PUT',
          url: '/api/tools/policies/mcp__Bad%20Name__x',
          headers,
          payload: { mode: 'auto' }
        })
      ).json(),
      { error: 'validation_failed' }
    )
    const stranger = await signUpWithOrg(app)
    t.equal(
      (
        await app.inject({
          method: 'PUT',
          url: '/api/tools/policies/mcp__local__fail',
          headers: { cookie: stranger.cookie },
          payload: { mode: 'auto' }
        })
      ).statusCode,
      404,
      "another org's server is not found"
    )
    t.notOk(
      (await app.inject({ method: 'GET', url: '/api/tools/policies', headers: { cookie: stranger.cookie } }))
        .json()
        .items.some((p: any) => p.tool.startsWith('mcp__'))
    )
    upstream.script.push(
      { calls: [{ id: 'call_f', name: 'mcp__local__fail', arguments: '{}' }] },
      { calls: [{ id: 'call_r', name: 'mcp__local__record', arguments: JSON.stringify({ note: 'hello mcp' }) }] },
      { text: 'Recorded.' }
    )
    const run = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers,
        payload: { prompt: 'record it', engine: 'openai' }
      })
    ).json().run
    const requested = await eventually(
      async () => (await storedEventsOf(app, owner.org.id, run.id)).find((e) => e.type === 'approval.requested')?.data
    )
    t.match(requested, { callId: 'call_r', tool: 'mcp__local__record', arguments: { note: 'hello mcp' } })
    t.equal(mcp.calls.length, 0, 'nothing is called before a person decides')
    // the approval is asked, then the run leaves its worker
    const waiting = await eventually(async () => {
      const now = (await app.inject({ method: 'GET', url: `/api/runs/${run.id}`, headers })).json().run
      return now.status === 'requires_action' ? now : null
    })
    t.equal(waiting.status, 'requires_action')
    const decided = await app.inject({
      method: 'POST',
      url: `/api/runs/${run.id}/approvals/${requested.approvalId}`,
      headers,
      payload: { decision: 'approve' }
    })
    t.equal(decided.statusCode, 200, decided.body)
    const done = await finishedRun(app, owner.cookie, run.id)
    t.equal(done.status, 'succeeded', done.error ?? '')
    t.equal(done.output, 'Recorded.')

    t.same(
      mcp.calls.map((c) => c.args),
      [{ note: 'hello mcp' }]
    )
    t.equal(mcp.calls[0]!.headers['x-api-key'], 'sekret-header-value', 'the sealed header reaches the server')
    t.equal(mcp.calls[0]!.headers['x-cairn-outbound'], '1', "marked as the service's own request")
    const offered = upstream.requests[0]!.body.tools.map((d: any) => d.function)
    t.match(
      offered.find((d: any) => d.name === 'mcp__local__record'),
      { description: 'records a note', parameters: { type: 'object', required: ['note'] } }
    )
    const events = await storedEventsOf(app, owner.org.id, run.id)
    const results = events.filter((e) => e.type === 'tool.result').map((e) => e.data)
    t.match(results, [
      { callId: 'call_f', tool: 'mcp__local__fail', status: 'error', content: 'the ticket system is down' },
      {
        callId: 'call_r',
        tool: 'mcp__local__record',
        status: 'ok',
        content: 'recorded: hello mcp',
        approvalId: requested.approvalId
      }
    ])
    t.ok(events.some((e) => e.type === 'tool.call' && e.data.tool === 'mcp__local__record'))

    t.equal((await app.inject({ method: 'DELETE', url: `/api/mcp-servers/${server.id}`, headers })).statusCode, 204)
    t.same(
      rowsOf(
        await app.db.execute(sql`select 1 from secrets where org_id = ${owner.org.id} and name like 'cairn:mcp:%'`)
      ),
      [],
      'its sealed headers went with it'
    )
  }
)

t.test("output limits and secret redaction; a run's tools may name MCP tools; an unknown one is a 400", async (t) => {
  const { app, upstream, owner, headers } = await setup(t, { TOOL_OUTPUT_MAX_BYTES: '256' })
  const mcp = await startLocalMcp(t)
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name: 'local', url: mcp.url } }))
      .statusCode,
    201
  )
  await app.db.insert(toolPolicies).values({ orgId: owner.org.id, tool: 'mcp__local__record', mode: 'auto' })
  t.equal(
    (await app.inject({ method: 'PUT', url: '/api/secrets/TOKEN', headers, payload: { value: 'tok-very-secret' } }))
      .statusCode < 300,
    true
  )

  t.match(
    (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers,
        payload: { prompt: 'x', engine: 'openai', tools: ['mcp__nosuch__record'] }
      })
    ).json(),
    { error: 'validation_failed', details: [{ path: '/body/tools/0' }] }
  )
  t.match(
    (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers,
        payload: { prompt: 'x', engine: 'openai', tools: ['mcp__local__nosuch'] }
      })
    ).json(),
    { error: 'validation_failed' }
  )

  const note = `tok-very-secret ${'x'.repeat(600)}`
  upstream.script.push(
    { calls: [{ id: 'call_1', name: 'mcp__local__record', arguments: JSON.stringify({ note }) }] },
    { text: 'ok' }
  )
  const created = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers,
    payload: { prompt: 'use TOKEN', engine: 'openai', secrets: ['TOKEN'], tools: ['mcp__local__record'] }
  })
  t.equal(created.statusCode, 201, created.body)
  const done = await finishedRun(app, owner.cookie, created.json().run.id)
  t.equal(done.status, 'succeeded', done.error ?? '')
  t.same(
    upstream.requests[0]!.body.tools.map((d: any) => d.function.name),
    ['mcp__local__record'],
    'only the tools the run names'
  )
  const result = (await storedEventsOf(app, owner.org.id, done.id)).find((e) => e.type === 'tool.result')!.data
  t.equal(result.truncated, true)
  t.ok(Buffer.byteLength(result.content) <= 256)
  t.notMatch(result.content, /tok-very-secret/)
  t.match(result.content, /^recorded: \[secret:TOKEN\]/)
})

t.test('an unreachable server offers no tools and never fails a run start', async (t) => {
  const { app, upstream, owner, headers } = await setup(t)
  const mcp = await startLocalMcp(t)
  const server = (
    await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name: 'gone', url: mcp.url } })
  ).json().server
  t.equal(server.ready, true)
  await mcp.close()
  upstream.script.push({ text: 'no tools needed' })
  const run = (
    await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'hello', engine: 'openai' } })
  ).json().run
  const done = await finishedRun(app, owner.cookie, run.id)
  t.equal(done.status, 'succeeded', done.error ?? '')
  const names = upstream.requests[0]!.body.tools.map((d: any) => d.function.name)
  t.notOk(
    names.some((n: string) => n.startsWith('mcp__')),
    'its tools are not offered'
  )
  const [row] = await app.db.select().from(mcpServers).where(eq(mcpServers.id, server.id))
  t.equal(row!.ready, false)
  t.ok(row!.lastError, 'why is recorded')
  const checked = await app.inject({ method: 'POST', url: `/api/mcp-servers/${server.id}/check`, headers })
  t.match(checked.json().server, { ready: false, lastError: /./ })
})

t.test(
  'a run cancelled while an MCP tool runs ends cancelled at once: the call is cut, its late answer is never recorded, no worker slot stays held',
  async (t) => {
    const { app, upstream, owner, headers } = await setup(t)
    const mcp = await startLocalMcp(t)
    t.equal(
      (await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name: 'local', url: mcp.url } }))
        .statusCode,
      201
    )
    t.equal(
      (
        await app.inject({
          method: 'PUT',
          url: '/api/tools/policies/mcp__local__slow',
          headers,
          payload: { mode: 'auto' }
        })
      ).statusCode,
      200
    )
    upstream.script.push(
      { calls: [{ id: 'call_s', name: 'mcp__local__slow', arguments: '{}' }] },
      { text: 'should never be asked' }
    )

    const run = (
      await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'be slow', engine: 'openai' } })
    ).json().run
    t.ok(await eventually(async () => mcp.slow.includes('started')), 'the MCP server is running the tool')
    t.equal(app.runs.worker.activeCount, 1)
    const started = Date.now()
    const cancel = await app.inject({ method: 'POST', url: `/api/runs/${run.id}/cancel`, headers })
    t.equal(cancel.statusCode, 200, cancel.body)
    const done = await finishedRun(app, owner.cookie, run.id)
    t.equal(done.status, 'cancelled', 'cancelled, while the tool has not answered')
    // (the tool answers only when released, below: any bound shows it did not wait for that)
    t.ok(Date.now() - started < 15_000, `promptly (${Date.now() - started} ms), not when the tool ends`)
    t.ok(await eventually(async () => mcp.slow.at(-1) === 'aborted'), 'the MCP server saw its request cut')
    t.ok(await eventually(async () => app.runs.worker.activeCount === 0), 'no worker slot is held')

    const events = await storedEventsOf(app, owner.org.id, run.id)
    t.match(events.find((e) => e.type === 'tool.call')?.data, { callId: 'call_s', tool: 'mcp__local__slow' })
    const results = events.filter((e) => e.type === 'tool.result').map((e) => e.data)
    t.match(
      results,
      [{ callId: 'call_s', tool: 'mcp__local__slow', status: 'cancelled', content: 'the run was cancelled' }],
      'the call is recorded cancelled, not answered'
    )
    t.equal(results.length, 1)
    t.equal(events.at(-1)!.type, 'run.cancelled', "the run's last event is its cancellation")
    t.equal(upstream.requests.length, 1, 'the model is not asked again')

    // the tool would have answered now: nothing more is written
    mcp.release()
    await new Promise((resolve) => setTimeout(resolve, 300))
    t.same(mcp.slow, ['started', 'aborted'])
    t.equal((await storedEventsOf(app, owner.org.id, run.id)).length, events.length, 'no event after the cancellation')
    t.equal(upstream.requests.length, 1)
  }
)

t.test(
  'Cairn never connects its own /api/mcp: its listening addresses and public URL are refused at registration and at every connection, with PROVIDER_ALLOW_PRIVATE=true and the dev org on',
  async (t) => {
    const { app, headers } = await setup(t, { PUBLIC_URL: 'https://cairn.example.test:8443' })
    const base = await listening(app)
    const port = new URL(base).port
    // the dev org answers a loopback caller without credentials: what a call to itself would act as
    t.equal((await fetch(`${base}/api/mcp-servers`)).status, 200, 'the dev org is on for loopback callers')
    const external = Object.values(networkInterfaces())
      .flat()
      .find((e) => e && !e.internal && e.family === 'IPv4')
    const own = [
      `${base}/api/mcp`,
      `http://localhost:${port}/api/mcp`,
      `http://LOCALHOST.:${port}/api/mcp`,
      `http://[::1]:${port}/api/mcp`,
      `http://0.0.0.0:${port}/api/mcp`,
      `http://127.0.0.2:${port}/api/mcp`,
      `http://2130706433:${port}/api/mcp`,
      `http://[::ffff:127.0.0.1]:${port}/api/mcp`,
      ...(external ? [`http://${external.address}:${port}/api/mcp`] : []),
      'https://cairn.example.test:8443/api/mcp',
      'https://CAIRN.example.test:8443/other'
    ]
    for (const url of own) {
      const res = await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name: 'self', url } })
      t.equal(res.statusCode, 400, `${url}: ${res.body}`)
      t.match(res.json(), {
        error: 'validation_failed',
        details: [
          {
            path: '/body/url',
            message: /this Cairn server's (own|public) address; MCP servers may not be reached there/
          }
        ]
      })
    }
    t.same(rowsOf(await app.db.execute(sql`select id from mcp_servers`)), [], 'nothing is stored')

    // a server accepted elsewhere whose URL now reaches Cairn itself (its name resolves anew,
    // or the server moved to this port): refused at the connection, before a request is sent
    const mcp = await startLocalMcp(t)
    const created = (
      await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name: 'moved', url: mcp.url } })
    ).json().server
    t.equal(created.ready, true)
    await app.db.execute(
      sql`update mcp_servers set url = ${`http://localhost:${port}/api/mcp`} where id = ${created.id}`
    )
    const checked = await app.inject({ method: 'POST', url: `/api/mcp-servers/${created.id}/check`, headers })
    t.match(checked.json().server, {
      ready: false,
      lastError:
        /^localhost reaches 127\.0\.0\.1 port \d+ is this Cairn server's own address; MCP servers may not be reached there$/
    })
    t.same(rowsOf(await app.db.execute(sql`select id from mcp_sessions`)), [], 'no MCP session was opened on Cairn')

    // the second wall: a request the service makes carries its mark, and a marked request
    // from loopback is anonymous (never the dev org), whatever else it says
    const marked = await fetch(`${base}/api/mcp-servers`, { headers: { 'x-cairn-outbound': '1' } })
    t.equal(marked.status, 401)
    t.equal(((await marked.json()) as any).error, 'unauthorized')
    const whoami = await fetch(`${base}/api/auth/whoami`, { headers: { 'x-cairn-outbound': 'anything' } })
    t.match(await whoami.json(), { kind: 'anonymous' })
    t.match(await (await fetch(`${base}/api/auth/whoami`)).json(), { kind: 'dev' })
  }
)

t.test(
  'a down server costs nothing: listings share one deadline, a failed server is skipped, then checked in the background with backoff until it comes back',
  async (t) => {
    let now = new Date('2026-03-02T09:00:00Z')
    const clock: Clock = { now: () => now }
    const timeoutMs = 3000
    const { app, upstream, owner, headers } = await setup(t, { MCP_TIMEOUT_MS: String(timeoutMs) }, clock)
    const good = await startLocalMcp(t)
    const hanging = [await startLocalMcp(t), await startLocalMcp(t), await startLocalMcp(t)]
    const failing = await startLocalMcp(t)
    const add = async (name: string, url: string) => {
      const res = await app.inject({ method: 'POST', url: '/api/mcp-servers', headers, payload: { name, url } })
      t.equal(res.statusCode, 201, res.body)
      return res.json().server
    }
    await add('good', good.url)
    const hangIds: string[] = []
    for (const [i, h] of hanging.entries()) hangIds.push((await add(`hang-${i}`, h.url)).id)
    const failingId = (await add('flaky', failing.url)).id
    for (const h of hanging) h.mode = 'hang'
    failing.mode = 'fail'
    const toolsOf = (i: number) =>
      (upstream.requests[i]!.body.tools ?? [])
        .map((d: any) => d.function.name)
        .filter((n: string) => n.startsWith('mcp__'))
    const server = async (id: string) =>
      (await app.inject({ method: 'GET', url: '/api/mcp-servers', headers })).json().items.find((s: any) => s.id === id)

    // three servers hang and one fails: the run start waits for none of them beyond one deadline
    upstream.script.push({ text: 'first' })
    const first = (
      await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'one', engine: 'openai' } })
    ).json().run
    t.equal((await finishedRun(app, owner.cookie, first.id)).status, 'succeeded')
    t.same(
      hanging.map((h) => h.requests > 0),
      [true, true, true],
      'every server was asked'
    )
    // one after the other, a server would be asked only once the one before was given up on
    const given = await eventually(async () => {
      const hung = hanging.map((h) => h.hung[0])
      return hung.every((h) => h?.closedAt != null) ? (hung as Array<{ at: number; closedAt: number }>) : null
    })
    t.ok(
      Math.max(...given.map((h) => h.at)) <= Math.min(...given.map((h) => h.closedAt)),
      'all three were asked before any was given up on: the listings share one deadline'
    )
    t.same(toolsOf(0), ['mcp__good__record', 'mcp__good__fail', 'mcp__good__slow'], 'the good one offers its tools')
    const hung = await eventually(async () => {
      const s = await server(hangIds[0]!)
      return s.nextCheckAt ? s : null
    })
    t.match(hung, {
      ready: false,
      lastError: `the server did not list its tools within ${timeoutMs} ms`,
      failingSince: now.toISOString()
    })
    t.match(await server(failingId), {
      ready: false,
      lastError: 'the server answered 503: down for maintenance',
      failingSince: now.toISOString()
    })

    // known down: the next run start does not ask them (no request at all)
    const asked = hanging.map((h) => h.requests)
    const failingAsked = failing.requests
    upstream.script.push({ text: 'second' })
    const second = (
      await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'two', engine: 'openai' } })
    ).json().run
    t.equal((await finishedRun(app, owner.cookie, second.id)).status, 'succeeded')
    t.same(
      hanging.map((h) => h.requests),
      asked,
      'a hanging server is not asked again at run start'
    )
    t.equal(failing.requests, failingAsked, 'nor a failing one')
    t.same(toolsOf(1), ['mcp__good__record', 'mcp__good__fail', 'mcp__good__slow'])
    const gone = await server(failingId)
    t.match(
      gone,
      { lastError: /503/, tools: [{ name: 'record' }, { name: 'fail' }, { name: 'slow' }] },
      'lastError kept'
    )

    // the background check (the test's clock says when it is due): once due and still
    // failing, it waits longer; once answering, it is back
    const firstGap = Date.parse(gone.nextCheckAt) - now.getTime()
    t.ok(firstGap > 0, 'it is due later')
    now = new Date(Date.parse(gone.nextCheckAt) + 1)
    app.mcp.checker.wake()
    const again = await eventually(async () => {
      const s = await server(failingId)
      return s.lastCheckedAt === now.toISOString() && s.nextCheckAt !== null ? s : null
    })
    t.ok(failing.requests > failingAsked, 'the background check asked it')
    t.equal(again.failingSince, gone.failingSince, 'failing since its first failure')
    t.ok(Date.parse(again.nextCheckAt) - now.getTime() >= firstGap, 'the next check waits longer')
    // checks still in flight (a hanging server's waits out its deadline) end first: a check that began while its
    // server hung ends failed whatever the server does next, and then waits for a time this clock never reaches
    await eventually(async () => app.mcp.checker.inFlight.length === 0)
    failing.mode = 'ok'
    hanging[0]!.mode = 'ok'
    now = new Date(Math.max(Date.parse(again.nextCheckAt), Date.parse((await server(hangIds[0]!)).nextCheckAt)) + 1)
    app.mcp.checker.wake()
    const back = await eventually(async () => {
      const s = await server(failingId)
      return s.ready ? s : null
    })
    t.match(back, { ready: true, lastError: null, failingSince: null, nextCheckAt: null })
    t.match(
      await eventually(async () => {
        const s = await server(hangIds[0]!)
        return s.ready ? s : null
      }),
      { ready: true, nextCheckAt: null }
    )
    upstream.script.push({ text: 'third' })
    const third = (
      await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'three', engine: 'openai' } })
    ).json().run
    t.equal((await finishedRun(app, owner.cookie, third.id)).status, 'succeeded')
    t.same(
      toolsOf(2).filter((n: string) => !n.startsWith('mcp__good__')),
      [
        'mcp__hang-0__record',
        'mcp__hang-0__fail',
        'mcp__hang-0__slow',
        'mcp__flaky__record',
        'mcp__flaky__fail',
        'mcp__flaky__slow'
      ],
      'both offer their tools again; the two still hanging do not'
    )
  }
)

t.test(
  'tool names a model API would refuse are warnings, never dropped silently; __ in a server name is refused',
  async (t) => {
    const { app, headers } = await setup(t)
    const mcp = await startLocalMcp(t, { extraTools: ['search.docs', 'x'.repeat(60), 'record', 'ok_tool'] })
    for (const name of ['a__b', 'tickets_']) {
      const refused = await app.inject({
        method: 'POST',
        url: '/api/mcp-servers',
        headers,
        payload: { name, url: mcp.url }
      })
      t.equal(refused.statusCode, 400, name)
      t.match(refused.json(), { error: 'validation_failed', message: /./, details: [{ path: '/body/name' }] })
    }
    const created = await app.inject({
      method: 'POST',
      url: '/api/mcp-servers',
      headers,
      payload: { name: 'docs', url: mcp.url }
    })
    t.equal(created.statusCode, 201, created.body)
    const server = created.json().server
    t.equal(server.tools.length, 7, 'every listed tool is shown')
    t.match(server.warnings, [/"search\.docs".*"mcp__docs__search\.docs"/, /"x{60}"/, /"record" is listed twice/])
    t.equal(server.warnings.length, 3)
    const listed = (await app.inject({ method: 'GET', url: '/api/mcp-servers', headers })).json().items[0]
    t.same(listed.warnings, server.warnings)
    const policies = (await app.inject({ method: 'GET', url: '/api/tools/policies', headers })).json().items
    t.same(
      policies.filter((p: any) => p.tool.startsWith('mcp__')).map((p: any) => p.tool),
      ['mcp__docs__record', 'mcp__docs__fail', 'mcp__docs__slow', 'mcp__docs__ok_tool'],
      'runs are offered the names a model accepts, each once'
    )
  }
)
