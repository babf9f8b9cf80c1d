import t from 'tap'
import { buildTestApp, createTestDatabase } from '../helper.js'

t.test('GET /api/health', async (t) => {
  const app = await buildTestApp(t)
  const res = await app.inject({ method: 'GET', url: '/api/health' })
  t.equal(res.statusCode, 200)
  t.same(res.json(), { status: 'ok' })
  t.match(res.headers['content-type'], /^application\/json/)
  t.match(res.headers['x-request-id'], /^[0-9a-f-]{36}$/)

  const ready = await app.inject({ method: 'GET', url: '/api/health?ready=1' })
  t.equal(ready.statusCode, 200)
  t.same(ready.json(), { status: 'ok' })
})

t.test('readiness answers 503 when the database is gone, liveness still 200', async (t) => {
  const db = await createTestDatabase(t)
  const app = await buildTestApp(t, { db })
  await db.database.close()
  const ready = await app.inject({ method: 'GET', url: '/api/health?ready=1' })
  t.equal(ready.statusCode, 503)
  t.same(ready.json(), { error: 'not_ready', message: 'the database does not answer' })
  const live = await app.inject({ method: 'GET', url: '/api/health' })
  t.equal(live.statusCode, 200)
})

t.test('health is public even when dev-org access is off', async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'false' } })
  t.equal((await app.inject({ method: 'GET', url: '/api/health' })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/api/config' })).statusCode, 200)
})

t.test('GET /api/config carries every field clients read', async (t) => {
  const app = await buildTestApp(t, { env: { SERVICE_COMMIT: 'abc123', ALLOW_DEV_ORG: 'false' } })
  const res = await app.inject({ method: 'GET', url: '/api/config' })
  t.equal(res.statusCode, 200)
  const body = res.json()
  t.same(Object.keys(body).sort(), [
    'allowDevOrg',
    'artifacts',
    'auth',
    'capabilities',
    'engines',
    'models',
    'release',
    'sandbox'
  ])
  t.equal(body.release, 'run-events-v1:abc123', 'the same string as the fingerprint header')
  t.equal(body.release, res.headers['x-service-release-fingerprint'])
  t.equal(body.allowDevOrg, false)
  t.same(Object.keys(body.auth).sort(), ['emailPassword', 'google'])
  t.equal(body.auth.google, false, 'no Google sign-in is offered')
  t.equal(body.auth.emailPassword, true, 'the auth routes sign people in with an email and a password')
  t.same(Object.keys(body.capabilities).sort(), ['github', 'memory', 'semanticSearch', 'slack', 'toolGateway'])
  for (const flag of Object.values(body.capabilities)) t.type(flag, 'boolean')
  t.match(body.capabilities, { github: true, slack: true }, 'the integrations this deployment offers')
  t.ok(Array.isArray(body.engines))
  t.ok(Array.isArray(body.models))
  t.type(body.sandbox.provider, 'string')
  t.ok(['full', 'preview'].includes(body.artifacts.fidelity))

  const dev = await buildTestApp(t)
  t.equal((await dev.inject({ method: 'GET', url: '/api/config' })).json().allowDevOrg, true)
})

t.test('health and config refuse hostile input with a 4xx', async (t) => {
  const app = await buildTestApp(t)
  const bad = await app.inject({ method: 'GET', url: '/api/health?ready=2' })
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().error, 'validation_failed')
  t.match(bad.json().details, [{ path: '/querystring/ready' }])

  const long = await app.inject({ method: 'GET', url: `/api/config?${'x'.repeat(10_000)}=1` })
  t.equal(long.statusCode, 200, 'unknown query parameters are ignored on reads')

  const headers = await app.inject({
    method: 'GET',
    url: '/api/health',
    headers: {
      'x-request-id': 'caller-chosen-id',
      accept: 'text/html',
      'content-type': 'application/json',
      'x-forwarded-for': '1.2.3.4, <script>'
    }
  })
  t.equal(headers.statusCode, 200)
  t.equal(headers.headers['x-request-id'], 'caller-chosen-id', 'an incoming request id is kept for tracing')

  const body = await app.inject({
    method: 'GET',
    url: '/api/config',
    headers: { 'content-type': 'application/json' },
    payload: '{"__proto__": {"x": 1}}'
  })
  t.ok(body.statusCode < 500, 'a GET with a hostile body is not a 5xx')
})
