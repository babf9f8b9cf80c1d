import { and, eq } from 'drizzle-orm'
import t from 'tap'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { mcpSessions } from '../../src/mcp/tables.js'
import { runs } from '../../src/runs/tables.js'
import { embeddedOnly } from '../passes.js'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { toolApprovals } from '../../src/runtime/tables.js'
import {
  addMember,
  buildTestApp,
  createTestDatabase,
  mintKey,
  secondHandle,
  signUp,
  signUpWithOrg,
  waitFor
} from '../helper.js'
import { buildMcpApp } from './group.js'
import { shellCall, startToolModel } from '../runs/tool-model.js'
import { addFacts } from '../memory/helpers.js'
import { call, listening, mcpClient, postMessage as post } from './mcp-client.js'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Agent, fetch as undiciFetch } from 'undici'

const FACTS = ['The office coffee machine needs descaling monthly', 'We deploy the payments service on Fridays']

async function setup(t: import('tap').Test, env: Record<string, string> = {}) {
  const app = await buildMcpApp(t, { env: { MEMORY_CAPTURE_WORKER: 'false', RUN_POLL_MS: '50', ...env } })
  const base = await listening(app)
  const owner = await signUpWithOrg(app)
  const key = await mintKey(app, owner.cookie)
  return { app, base, owner, key }
}

t.test(
  'the SDK client lists the tools and searches memory and knowledge as the caller, with the same answers as the HTTP routes',
  async (t) => {
    const { app, base, owner, key } = await setup(t)
    await addFacts(app.db, owner.org.id, 'org', '', FACTS)
    const created = await app.inject({
      method: 'POST',
      url: '/api/knowledge',
      headers: { cookie: owner.cookie },
      payload: { title: 'Coffee <care>', body: 'Descale the coffee machine & rinse it: "monthly".' }
    })
    t.equal(created.statusCode, 201, created.body)
    const recordId = created.json().record.id as string

    const { client, transport } = await mcpClient(t, base, { authorization: key.authorization })
    t.ok(transport.sessionId, 'initialize answered a session id')
    t.same(client.getServerVersion()?.name, 'cairn')
    const tools = (await client.listTools()).tools
    t.same(
      tools.map((tool) => tool.name),
      [
        'memory_search',
        'knowledge_search',
        'list_threads',
        'get_run',
        'start_run',
        'run_skill',
        'list_approvals',
        'decide_approval'
      ]
    )
    t.match(tools.find((tool) => tool.name === 'start_run')!.inputSchema, {
      type: 'object',
      required: ['prompt'],
      properties: { waitSeconds: { maximum: 60 } }
    })

    const viaHttp = (
      await app.inject({
        method: 'GET',
        url: '/api/memory/search?q=coffee',
        headers: { authorization: key.authorization }
      })
    ).json()
    const viaMcp = await call(client, 'memory_search', { query: 'coffee' })
    t.equal(viaMcp.isError, false)
    t.same(
      viaMcp.body.items.map((i: any) => i.content),
      [FACTS[0]]
    )
    t.same(viaMcp.body.items, viaHttp.items, 'the same items as GET /api/memory/search')

    // personal memory needs a signed-in person: a key fails closed, as over HTTP
    const personal = await call(client, 'memory_search', { query: 'coffee', scope: 'personal' })
    t.same(personal, {
      isError: true,
      body: { error: 'sign-in required', message: 'personal memory needs a signed-in user' }
    })

    const knowledge = await call(client, 'knowledge_search', { query: 'coffee' })
    t.equal(knowledge.isError, false)
    t.equal(knowledge.body.items[0].id, recordId)
    t.equal(knowledge.body.items[0].title, 'Coffee <care>')
    t.notMatch(knowledge.body.items[0].snippet, /<mark>|&amp;|&quot;/, 'plain text, no HTML')
    t.match(knowledge.body.items[0].snippet, 'Descale the coffee machine & rinse it: "monthly".')

    const resources = await client.listResources()
    t.same(
      resources.resources.map((r) => r.uri),
      [`cairn://knowledge/${recordId}`]
    )
    const read = await client.readResource({ uri: `cairn://knowledge/${recordId}` })
    t.same(read.contents, [
      {
        uri: `cairn://knowledge/${recordId}`,
        mimeType: 'text/markdown',
        text: '# Coffee <care>\n\nDescale the coffee machine & rinse it: "monthly".'
      }
    ])

    const bad = await call(client, 'memory_search', { query: '' })
    t.equal(bad.isError, true)
    t.equal(bad.body.error, 'validation_failed')
    const nul = await call(client, 'knowledge_search', { query: 'a\u0000b' })
    t.equal(nul.body.error, 'validation_failed', 'NUL in an argument is refused like in a query string')
    await t.rejects(client.callTool({ name: 'shell', arguments: {} }), /unknown tool/)

    const sessionId = transport.sessionId!
    const [row] = await app.db.select().from(mcpSessions).where(eq(mcpSessions.id, sessionId))
    t.match(row, { orgId: owner.org.id, principal: `key:${key.id}` })
    await transport.terminateSession()
    t.same(await app.db.select().from(mcpSessions).where(eq(mcpSessions.id, sessionId)), [], 'DELETE ends the session')
  }
)

t.test(
  'another org is invisible: its records, runs and skills are not found; a session cookie and the dev org work too',
  async (t) => {
    const { app, base, owner } = await setup(t)
    const other = await signUpWithOrg(app)
    const theirs = (
      await app.inject({
        method: 'POST',
        url: '/api/knowledge',
        headers: { cookie: other.cookie },
        payload: { title: 'Secret plan', body: 'Their coffee.' }
      })
    ).json().record.id
    const theirRun = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: other.cookie },
        payload: { prompt: 'theirs' }
      })
    ).json().run.id
    const theirSkill = (
      await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers: { cookie: other.cookie },
        payload: { name: 'theirs', description: 'Theirs', instructions: 'Be theirs.' }
      })
    ).json().skill.id

    const { client } = await mcpClient(t, base, { cookie: owner.cookie })
    t.same((await client.listResources()).resources, [])
    await t.rejects(client.readResource({ uri: `cairn://knowledge/${theirs}` }), /Resource not found/)
    t.same(await call(client, 'get_run', { id: theirRun }), {
      isError: true,
      body: { error: 'not_found', message: 'no such run in this organization' }
    })
    t.same((await call(client, 'run_skill', { skillId: theirSkill })).body.error, 'not_found')
    t.same((await call(client, 'knowledge_search', { query: 'coffee' })).body.items, [])
    t.same((await call(client, 'list_threads')).body.items, [])
    t.equal(
      (await call(client, 'memory_search', { query: 'coffee', scope: 'personal' })).isError,
      false,
      'a signed-in person may search personal memory'
    )

    // no credentials from loopback: the dev org
    const dev = await mcpClient(t, base)
    const devRun = await call(dev.client, 'start_run', { prompt: 'dev hello', waitSeconds: 30 })
    t.match(devRun.body, { status: 'succeeded', output: 'dev hello' })
    const [row] = await app.db.select().from(runs).where(eq(runs.id, devRun.body.id))
    t.equal(row!.orgId, DEV_ORG.id)
  }
)

t.test(
  'start_run: a run with origin mcp, answered with its output when it ends in time, else its id and status; an idempotency key starts it once',
  async (t) => {
    const { app, base, owner, key } = await setup(t)
    const { client } = await mcpClient(t, base, { authorization: key.authorization })

    const done = await call(client, 'start_run', { prompt: 'hello from mcp', waitSeconds: 30 })
    t.equal(done.isError, false)
    t.match(done.body, { status: 'succeeded', output: 'hello from mcp', error: null })
    const [row] = await app.db.select().from(runs).where(eq(runs.id, done.body.id))
    t.match(row, { origin: 'mcp', orgId: owner.org.id, userId: null, status: 'succeeded' })

    const followUp = await call(client, 'start_run', { prompt: 'and again', rootRunId: done.body.id })
    t.equal(followUp.body.rootRunId, done.body.id)
    t.ok(['queued', 'running', 'succeeded'].includes(followUp.body.status))
    t.notOk('output' in followUp.body && followUp.body.status !== 'succeeded', 'no output before it ended')
    const fetched = await call(client, 'get_run', { id: followUp.body.id })
    t.equal(fetched.body.run.origin, 'mcp')
    t.equal(fetched.body.run.rootRunId, done.body.id)

    const threads = await call(client, 'list_threads', { limit: 5 })
    t.same(
      threads.body.items.map((th: any) => th.rootRunId),
      [done.body.id]
    )

    const before = (await app.db.select().from(runs).where(eq(runs.orgId, owner.org.id))).length
    const first = await call(client, 'start_run', { prompt: 'only once', idempotencyKey: 'k-1' })
    const again = await call(client, 'start_run', { prompt: 'only once', idempotencyKey: 'k-1' })
    t.equal(again.body.id, first.body.id, 'the same key answers the first run')
    t.equal((await app.db.select().from(runs).where(eq(runs.orgId, owner.org.id))).length, before + 1)
    const reused = await call(client, 'start_run', { prompt: 'something else', idempotencyKey: 'k-1' })
    t.match(reused, { isError: true, body: { error: 'idempotency_key_reused' } })

    t.match(await call(client, 'start_run', { prompt: 'x', model: 'no-such-model' }), {
      isError: true,
      body: { error: 'engine_unavailable' }
    })
    t.match(await call(client, 'start_run', { prompt: 'x', rootRunId: 'nosuchthread' }), {
      isError: true,
      body: { error: 'not_found' }
    })
  }
)

t.test('a caller that goes away during a call is let go, and the calls after it are answered', async (t) => {
  // no worker: the run stays queued, so the call waits until its caller leaves
  const { app, base, owner, key } = await setup(t, { RUN_WORKER_CONCURRENCY: '0' })
  const { client, transport } = await mcpClient(t, base, { authorization: key.authorization })
  const leaving = new AbortController()
  const waiting = post(
    base,
    { authorization: key.authorization, 'mcp-session-id': transport.sessionId! },
    JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'start_run', arguments: { prompt: 'never ends here', waitSeconds: 60 } }
    }),
    leaving.signal
  )
  const [queued] = await waitFor('the run to be started', async () => {
    const rows = await app.db.select().from(runs).where(eq(runs.orgId, owner.org.id))
    return rows.length > 0 && rows
  })
  t.equal(queued!.status, 'queued')
  leaving.abort()
  await t.rejects(waiting, 'the caller left')
  const answers = await Promise.all([1, 2, 3].map(() => call(client, 'get_run', { id: queued!.id })))
  for (const answer of answers) t.match(answer, { isError: false, body: { run: { id: queued!.id, status: 'queued' } } })
  t.match(await call(client, 'list_threads', { limit: 5 }), { isError: false })
})

t.test('run_skill runs a skill of the org as POST /api/skills/:id/run does', async (t) => {
  const { app, base, owner, key } = await setup(t)
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers: { cookie: owner.cookie },
      payload: { name: 'shout', description: 'Shout', instructions: 'Answer loudly.' }
    })
  ).json().skill
  const { client } = await mcpClient(t, base, { authorization: key.authorization })
  const ran = await call(client, 'run_skill', { skillId: skill.id, input: 'skill input here', waitSeconds: 30 })
  t.match(ran.body, { status: 'succeeded', output: 'skill input here' })
  const [row] = await app.db
    .select()
    .from(runs)
    .where(and(eq(runs.id, ran.body.id), eq(runs.orgId, owner.org.id)))
  t.match(row, { origin: 'skill', instructions: 'Answer loudly.', metadata: { skillId: skill.id } })
})

t.test(
  "sessions are rows: a session opened on one instance is served by another; another caller's or an ended session is 404; bad messages get JSON-RPC errors",
  async (t) => {
    const shared = await createTestDatabase(t)
    const second = await secondHandle(t, shared)
    const a = await buildMcpApp(t, { db: shared })
    const b = await buildMcpApp(t, { db: second, env: { RUN_WORKER_CONCURRENCY: '0' } })
    const [baseA, baseB] = [await listening(a), await listening(b)]
    const owner = await signUpWithOrg(a)
    const key = await mintKey(a, owner.cookie)
    const otherKey = await mintKey(a, owner.cookie, 'other key')

    const onA = await mcpClient(t, baseA, { authorization: key.authorization })
    const sessionId = onA.transport.sessionId!
    // the same session, continued on B: the SDK client does not initialize again
    const onB = await mcpClient(t, baseB, { authorization: key.authorization }, sessionId)
    t.equal(onB.transport.sessionId, sessionId)
    t.equal((await onB.client.listTools()).tools.length, 8)
    t.equal((await call(onB.client, 'list_threads')).isError, false)

    const listMessage = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' })
    const ok = await post(baseB, { authorization: key.authorization, 'mcp-session-id': sessionId }, listMessage)
    t.equal(ok.status, 200)
    t.equal(ok.headers.get('mcp-session-id'), sessionId)
    t.equal(ok.headers.get('x-service-api-compat'), 'run-events-v1', 'the release headers of every /api answer')
    t.equal(((await ok.json()) as any).result.tools.length, 8)

    const stranger = await post(
      baseB,
      { authorization: otherKey.authorization, 'mcp-session-id': sessionId },
      listMessage
    )
    t.equal(stranger.status, 404, 'another key cannot use the session')
    t.same(await stranger.json(), { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null })
    const missing = await post(baseB, { authorization: key.authorization }, listMessage)
    t.equal(missing.status, 400)
    t.equal(((await missing.json()) as any).error.code, -32000)

    const emptyBatch = await post(baseA, { authorization: key.authorization, 'mcp-session-id': sessionId }, '[]')
    t.ok(emptyBatch.status < 500, 'an empty batch is no request at all')
    for (const [body, code] of [
      ['{not json', -32700],
      ['{"hello":"world"}', -32700],
      ['"text"', -32700]
    ] as const) {
      const res = await post(baseA, { authorization: key.authorization, 'mcp-session-id': sessionId }, body)
      t.equal(res.status, 400, body)
      const answer = (await res.json()) as any
      t.equal(answer.jsonrpc, '2.0', body)
      t.equal(answer.error.code, code, body)
    }
    const unknownMethod = await post(
      baseA,
      { authorization: key.authorization, 'mcp-session-id': sessionId },
      JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'no/such' })
    )
    t.equal(unknownMethod.status, 200)
    t.match(await unknownMethod.json(), { id: 7, error: { code: -32601 } })
    const unauthenticated = await fetch(`${baseA}/api/mcp`, {
      method: 'POST',
      body: listMessage,
      headers: { authorization: 'Bearer cairn_nope', 'content-type': 'application/json' }
    })
    t.equal(unauthenticated.status, 401)
    t.equal(((await unauthenticated.json()) as any).error, 'unauthorized')

    // the same call answered by the pooled server (a plain JSON request) and through the SDK's
    // transport (another spelling of the media type): the same answer, the request's id echoed
    const search = (id: number | string) =>
      JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'list_threads', arguments: { limit: 5 } }
      })
    const direct = await post(baseA, { authorization: key.authorization, 'mcp-session-id': sessionId }, search('x-1'))
    const viaSdk = await post(
      baseA,
      {
        authorization: key.authorization,
        'mcp-session-id': sessionId,
        'content-type': 'application/json; charset=utf-8'
      },
      search('x-1')
    )
    t.equal(direct.status, 200)
    t.equal(viaSdk.status, 200)
    t.equal(direct.headers.get('content-type'), viaSdk.headers.get('content-type'))
    t.equal(direct.headers.get('mcp-session-id'), sessionId)
    t.same(await direct.json(), await viaSdk.json(), 'both ways answer alike')
    const oldVersion = await post(
      baseA,
      { authorization: key.authorization, 'mcp-session-id': sessionId, 'mcp-protocol-version': '1999-01-01' },
      search(2)
    )
    t.equal(oldVersion.status, 400, 'an unsupported protocol version is refused')
    t.equal(((await oldVersion.json()) as any).error.code, -32000)
    const notAccepting = await post(
      baseA,
      { authorization: key.authorization, 'mcp-session-id': sessionId, accept: 'application/json' },
      search(3)
    )
    t.equal(notAccepting.status, 406)

    // ended on B: B refuses at once, A once it heard (a notice, within milliseconds); then a
    // call that would start a run starts none
    await onB.transport.terminateSession()
    const endedOnB = await post(baseB, { authorization: key.authorization, 'mcp-session-id': sessionId }, listMessage)
    t.equal(endedOnB.status, 404)
    await waitFor(
      'A to refuse the ended session',
      async () =>
        (await post(baseA, { authorization: key.authorization, 'mcp-session-id': sessionId }, listMessage)).status ===
        404
    )
    const startMessage = JSON.stringify({
      jsonrpc: '2.0',
      id: 9,
      method: 'tools/call',
      params: { name: 'start_run', arguments: { prompt: 'after the end' } }
    })
    const refused = await post(baseA, { authorization: key.authorization, 'mcp-session-id': sessionId }, startMessage)
    t.equal(refused.status, 404)
    t.same(await refused.json(), { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null })
    t.same(await a.db.select().from(runs).where(eq(runs.orgId, owner.org.id)), [], 'no run was started')
  }
)

t.test('concurrent calls of two organizations each see only their own memory', async (t) => {
  const { app, base, owner, key } = await setup(t)
  const other = await signUpWithOrg(app)
  const otherKey = await mintKey(app, other.cookie)
  await addFacts(app.db, owner.org.id, 'org', '', ['Ours: the deploy runbook lives in the wiki'])
  await addFacts(app.db, other.org.id, 'org', '', ['Theirs: the deploy runbook lives in a drawer'])
  const ours = await mcpClient(t, base, { authorization: key.authorization })
  const theirs = await mcpClient(t, base, { authorization: otherKey.authorization })
  const calls = Array.from({ length: 24 }, (_, i) =>
    i % 2 === 0
      ? call(ours.client, 'memory_search', { query: 'deploy runbook' }).then((answer) => ['ours', answer] as const)
      : call(theirs.client, 'memory_search', { query: 'deploy runbook' }).then((answer) => ['theirs', answer] as const)
  )
  for (const [whose, answer] of await Promise.all(calls)) {
    t.equal(answer.isError, false)
    t.same(
      answer.body.items.map((item: any) => item.content),
      [
        whose === 'ours' ? 'Ours: the deploy runbook lives in the wiki' : 'Theirs: the deploy runbook lives in a drawer'
      ],
      whose
    )
  }
})

t.test(
  "the SDK client's GET opens the session's server stream; only its caller may open it; DELETE ends the session and its stream",
  async (t) => {
    const { app, base, owner } = await setup(t)
    // the SDK client opens the server stream by itself once initialized: its GETs are recorded
    const agent = new Agent()
    t.teardown(() => agent.destroy())
    let opened: (res: Response) => void
    const firstGet = new Promise<Response>((resolve) => (opened = resolve))
    const fetch = (async (url: string | URL, init?: RequestInit) => {
      const res = (await undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as Response
      if ((init?.method ?? 'GET') !== 'GET' || !res.body) return res
      // the client reads one copy of the stream, the test the other
      const [theirs, ours] = res.body.tee()
      opened(new Response(ours, { status: res.status, headers: res.headers }))
      return new Response(theirs, { status: res.status, headers: res.headers })
    }) as typeof globalThis.fetch
    const transport = new StreamableHTTPClientTransport(new URL(`${base}/api/mcp`), {
      requestInit: { headers: { cookie: owner.cookie } },
      fetch
    })
    const client = new Client({ name: 'cairn-test', version: '1.0.0' })
    await client.connect(transport)
    t.teardown(() => client.close())
    const stream = await firstGet
    t.equal(stream.status, 200, 'the server stream opened')
    t.equal(stream.headers.get('content-type'), 'text/event-stream')
    t.equal(stream.headers.get('mcp-session-id'), transport.sessionId)
    t.equal((await client.listTools()).tools.length > 0, true, 'calls go on while the stream is open')

    const sessionId = transport.sessionId!
    const get = (headers: Record<string, string>) =>
      app.inject({
        method: 'GET',
        url: '/api/mcp',
        headers: { accept: 'text/event-stream', 'mcp-protocol-version': '2025-11-25', ...headers }
      })
    const noSession = await get({ cookie: owner.cookie })
    t.equal(noSession.statusCode, 400)
    t.match(noSession.json(), { jsonrpc: '2.0', error: { code: -32000, message: /Mcp-Session-Id/ } })
    // the session is its caller's: another organization's person, and another member of the same one, get 404
    const stranger = await signUpWithOrg(app)
    const colleague = await signUp(app)
    await addMember(app, owner.cookie, owner.org.id, colleague.user.email, 'member')
    for (const [who, cookie] of [
      ['another organization', stranger.cookie],
      ['another member', colleague.cookie]
    ] as const) {
      const res = await get({ cookie, 'mcp-session-id': sessionId })
      t.equal(res.statusCode, 404, who)
      t.match(res.json(), { error: { code: -32001 } }, who)
    }
    t.equal((await get({ 'mcp-session-id': sessionId })).statusCode, 404, 'the dev org (loopback, no cookie)')

    // ending the session (DELETE) removes it and ends its open stream
    const reader = stream.body!.getReader()
    const drained = (async () => {
      let text = ''
      for (;;) {
        const { done, value } = await reader.read()
        if (done) return text
        text += new TextDecoder().decode(value)
      }
    })()
    await transport.terminateSession()
    t.same(await app.db.select().from(mcpSessions).where(eq(mcpSessions.id, sessionId)), [], 'the session ended')
    t.notMatch(await drained, /data:/, 'the stream ended without a message')
    t.equal((await get({ cookie: owner.cookie, 'mcp-session-id': sessionId })).statusCode, 404, 'an ended session')
  }
)

t.test(
  "/api/mcp answers as /openapi.json declares: the transport's JSON-RPC errors, ErrorBody before it, bodiless 202 and DELETE 200",
  embeddedOnly,
  async (t) => {
    // /openapi.json is the whole app's
    const app = await buildTestApp(t, { env: { BODY_LIMIT: '1024' } })
    const owner = await signUpWithOrg(app)
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
    const ajv = new Ajv2020({ strict: false })
    const declared = doc.paths['/api/mcp'] as Record<string, { responses: Record<string, any> }>
    const seen = new Set<string>()

    /** The answer is one its operation declares: its status, its media type (none when empty), its body's schema. */
    function conforms(label: string, method: 'get' | 'post' | 'delete', res: any, status: number) {
      t.equal(res.statusCode, status, `${label}: ${res.body}`)
      let response = declared[method]!.responses[String(status)]
      if (response?.$ref) response = doc.components.responses[response.$ref.split('/').pop()]
      if (!t.ok(response, `${label}: ${method.toUpperCase()} ${status} is declared`)) return
      seen.add(`${method} ${status}`)
      if (res.body === '') return void t.notOk(response.content, `${label}: declared without a body`)
      const type = String(res.headers['content-type']).split(';')[0]!
      const media = response.content?.[type]
      if (!t.ok(media, `${label}: declared as ${type}`)) return
      const validate = ajv.compile({ ...media.schema, components: doc.components })
      t.ok(
        validate(res.json()),
        `${label}: the body fits ${JSON.stringify(media.schema)} ${ajv.errorsText(validate.errors)}`
      )
    }

    const auth = { cookie: owner.cookie }
    const rpc = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25'
    }
    const std = { ...auth, ...rpc }
    const list = JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' })
    const post = (headers: Record<string, string>, payload: string) =>
      app.inject({ method: 'POST', url: '/api/mcp', headers, payload })
    const initialized = await post(
      std,
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } }
      })
    )
    conforms('initialize', 'post', initialized, 200)
    const session = { 'mcp-session-id': initialized.headers['mcp-session-id'] as string }
    conforms('a call', 'post', await post({ ...std, ...session }, list), 200)
    const notified = await post(
      { ...std, ...session },
      JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })
    )
    conforms('a notification', 'post', notified, 202)
    conforms('no session id', 'post', await post(std, list), 400)
    conforms('an unknown session', 'post', await post({ ...std, 'mcp-session-id': 'nope' }, list), 404)
    conforms('not JSON', 'post', await post({ ...std, ...session }, '{oops'), 400)
    conforms('not JSON-RPC', 'post', await post({ ...std, ...session }, '{"foo":1}'), 400)
    const oldVersion = { ...std, ...session, 'mcp-protocol-version': '1999-01-01' }
    conforms('an unknown protocol version', 'post', await post(oldVersion, list), 400)
    conforms('Accept without JSON', 'post', await post({ ...std, ...session, accept: 'text/html' }, list), 406)
    conforms(
      'not JSON by its type',
      'post',
      await post({ ...std, ...session, 'content-type': 'text/plain' }, list),
      415
    )
    const gzipped = { ...std, ...session, 'content-encoding': 'gzip' }
    conforms('a compressed body', 'post', await post(gzipped, list), 415)
    conforms('too large', 'post', await post({ ...std, ...session }, 'x'.repeat(2048)), 413)
    // a caller from elsewhere without credentials (loopback ones act in the dev org)
    const stranger = (method: 'POST' | 'GET' | 'DELETE') =>
      app.inject({ method, url: '/api/mcp', headers: rpc, remoteAddress: '10.0.0.1', payload: list })
    conforms('no credentials', 'post', await stranger('POST'), 401)
    conforms('GET, no credentials', 'get', await stranger('GET'), 401)
    conforms('DELETE, no credentials', 'delete', await stranger('DELETE'), 401)

    const get = (headers: Record<string, string>) => app.inject({ method: 'GET', url: '/api/mcp', headers })
    conforms('GET without a session', 'get', await get({ ...auth, accept: 'text/event-stream' }), 400)
    conforms('GET, a session id too long', 'get', await get({ ...auth, 'mcp-session-id': 'x'.repeat(200) }), 400)
    conforms(
      'GET, an unknown session',
      'get',
      await get({ ...auth, accept: 'text/event-stream', 'mcp-session-id': 'nope' }),
      404
    )
    conforms('GET without SSE in Accept', 'get', await get({ ...auth, ...session, accept: 'application/json' }), 406)

    const del = (headers: Record<string, string>) => app.inject({ method: 'DELETE', url: '/api/mcp', headers })
    conforms('DELETE without a session', 'delete', await del(auth), 400)
    conforms('DELETE, an unknown session', 'delete', await del({ ...auth, 'mcp-session-id': 'nope' }), 404)
    conforms('DELETE', 'delete', await del({ ...auth, ...session }), 200)
    t.same(await app.db.select().from(mcpSessions), [], 'the session ended')

    // every error status declared for /api/mcp itself (not the shared refusals) was answered above
    for (const method of ['post', 'get', 'delete']) {
      for (const [status, response] of Object.entries(declared[method]!.responses)) {
        if (response.$ref || ['403', '500'].includes(status)) continue
        t.ok(seen.has(`${method} ${status}`) || (method === 'get' && status === '200'), `${method} ${status} was seen`)
      }
    }
  }
)

t.test(
  "approvals through MCP: start_run and get_run list a waiting run's calls, list_approvals and decide_approval act as the HTTP routes, another org's run is not found",
  async (t) => {
    const model = await startToolModel(t)
    const dir = await mkdtemp(join(tmpdir(), 'cairn-mcp-approvals-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    const { app, base, owner, key } = await setup(t, {
      OPENAI_BASE_URL: model.url,
      MODELS: 'tool-model',
      DATA_DIR: dir,
      SANDBOX_UNCONFINED: 'true'
    })
    model.script.push(shellCall('echo approved-by-key'), { text: 'The command ran.' })
    const { client } = await mcpClient(t, base, { authorization: key.authorization })

    // a call waiting for a person answers at once, whatever waitSeconds says
    const started = await call(client, 'start_run', { prompt: 'run it', model: 'tool-model', waitSeconds: 60 })
    t.equal(started.isError, false, JSON.stringify(started.body))
    t.match(started.body, { status: 'requires_action' })
    t.notOk('output' in started.body, 'no output before it ended')
    const runId = started.body.id as string
    const [pending] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))
    t.same(started.body.pendingApprovals, [
      { id: pending!.id, tool: 'shell', arguments: { command: 'echo approved-by-key' } }
    ])
    const fetched = await call(client, 'get_run', { id: runId })
    t.match(fetched.body, { run: { id: runId, status: 'requires_action' } })
    t.same(fetched.body.pendingApprovals, started.body.pendingApprovals, 'get_run lists the same calls')

    const listed = await call(client, 'list_approvals', { runId })
    const viaHttp = await app.inject({
      method: 'GET',
      url: `/api/runs/${runId}/approvals`,
      headers: { authorization: key.authorization }
    })
    t.equal(viaHttp.statusCode, 200, 'a key reads the approvals route')
    t.same(listed.body, viaHttp.json(), 'the same page as GET /api/runs/:id/approvals')
    t.match(listed.body.items, [{ id: pending!.id, status: 'pending', decidedBy: null, tool: 'shell' }])

    // another org: its session and its key see nothing and decide nothing
    const other = await signUpWithOrg(app)
    const otherKey = await mintKey(app, other.cookie)
    for (const headers of [{ cookie: other.cookie }, { authorization: otherKey.authorization }] as Array<
      Record<string, string>
    >) {
      const { client: theirs } = await mcpClient(t, base, headers)
      const notFound = { isError: true, body: { error: 'not_found', message: 'no such run in this organization' } }
      t.same(await call(theirs, 'list_approvals', { runId }), notFound)
      t.same(await call(theirs, 'decide_approval', { runId, approvalId: pending!.id, decision: 'approve' }), notFound)
      t.same(await call(theirs, 'get_run', { id: runId }), notFound)
    }
    // a member who did not start the run is refused as over HTTP
    const member = await signUp(app)
    await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
    const { client: asMember } = await mcpClient(t, base, { cookie: member.cookie })
    t.same(await call(asMember, 'decide_approval', { runId, approvalId: pending!.id, decision: 'deny' }), {
      isError: true,
      body: {
        error: 'forbidden',
        message: 'only the person who started the run, or an organization owner or admin, may decide its tool calls'
      }
    })
    t.match(await call(client, 'decide_approval', { runId, approvalId: pending!.id, decision: 'maybe' }), {
      isError: true,
      body: { error: 'validation_failed' }
    })
    const [still] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, pending!.id))
    t.match(still, { status: 'pending', decidedBy: null }, 'nothing was decided')

    const decided = await call(client, 'decide_approval', { runId, approvalId: pending!.id, decision: 'approve' })
    t.equal(decided.isError, false, JSON.stringify(decided.body))
    t.match(decided.body, { approval: { id: pending!.id, status: 'approved', decidedBy: `key:${key.id}` } })
    t.match(await call(client, 'decide_approval', { runId, approvalId: pending!.id, decision: 'deny' }), {
      isError: true,
      body: { error: 'conflict', message: 'the approval is already approved' }
    })
    // once every call is decided a wait waits for the run to go on
    const waited = await app.inject({
      method: 'GET',
      url: `/api/runs/${runId}?wait=30`,
      headers: { authorization: key.authorization }
    })
    t.match(waited.json().run, { status: 'succeeded', output: 'The command ran.' })
    const done = await call(client, 'get_run', { id: runId })
    t.notOk('pendingApprovals' in done.body, 'a run that ended lists no calls')
    const [row] = await app.db.select().from(toolApprovals).where(eq(toolApprovals.id, pending!.id))
    t.match(row, { status: 'approved', decidedBy: `key:${key.id}` })
  }
)
