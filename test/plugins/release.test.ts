import t from 'tap'
import { embeddedOnly } from '../passes.js'
import { buildTestApp, createTestDatabase } from '../helper.js'

t.test('release headers on every /api response', embeddedOnly, async (t) => {
  const app = await buildTestApp(t, { env: { SERVICE_COMMIT: 'c0ffee' } })
  for (const [method, url, status] of [
    ['GET', '/api/health', 200],
    ['GET', '/api/config', 200],
    ['GET', '/api/does-not-exist', 404],
    ['GET', '/api/health?ready=nope', 400],
    ['DELETE', '/api/health', 405]
  ] as const) {
    const res = await app.inject({ method, url })
    t.equal(res.statusCode, status, `${method} ${url}`)
    t.equal(res.headers['x-service-release-fingerprint'], 'run-events-v1:c0ffee', `${method} ${url} fingerprint`)
    t.equal(res.headers['x-service-api-compat'], 'run-events-v1', `${method} ${url} compat`)
  }
  const outside = await app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(outside.headers['x-service-api-compat'], undefined, 'not outside /api')
  const lookalike = await app.inject({ method: 'GET', url: '/apix' })
  t.equal(lookalike.headers['x-service-api-compat'], undefined, 'not on a look-alike prefix')
})

t.test('the compatibility gate on a release build', embeddedOnly, async (t) => {
  const db = await createTestDatabase(t)
  const app = await buildTestApp(t, { db, env: { SERVICE_COMMIT: 'c0ffee' } })
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE'] as const) {
    const res = await app.inject({
      method,
      url: '/api/anything',
      headers: { 'x-service-client-release': 'run-events-v1:old', 'content-type': 'application/json' },
      payload: '{not json'
    })
    t.equal(res.statusCode, 409, `${method} mismatched`)
    t.ok(res.headers['x-request-id'], 'a refusal still carries the request id')
    t.equal(res.headers['x-content-type-options'], 'nosniff', 'and the security headers')
    t.same(res.json(), {
      error: 'frontend_release_mismatch',
      release: 'run-events-v1:c0ffee',
      message: res.json().message
    })
    t.match(res.json().message, /run-events-v1:old/)
    t.equal(res.headers['x-service-release-fingerprint'], 'run-events-v1:c0ffee')
  }
  const matching = await app.inject({
    method: 'POST',
    url: '/api/anything',
    headers: { 'x-service-client-release': 'run-events-v1:c0ffee' }
  })
  t.equal(matching.statusCode, 404, 'the same release passes the gate')
  const absent = await app.inject({ method: 'POST', url: '/api/anything' })
  t.equal(absent.statusCode, 404, 'no header passes the gate')
  const read = await app.inject({
    method: 'GET',
    url: '/api/health',
    headers: { 'x-service-client-release': 'run-events-v1:old' }
  })
  t.equal(read.statusCode, 200, 'GET is never gated')
  const empty = await app.inject({ method: 'POST', url: '/api/anything', headers: { 'x-service-client-release': '' } })
  t.equal(empty.statusCode, 409, 'an empty release is present and different')
})

t.test('a development build accepts every client release', embeddedOnly, async (t) => {
  for (const commit of [undefined, '2.0.0-dev']) {
    const app = await buildTestApp(t, { env: commit ? { SERVICE_COMMIT: commit } : {} })
    const res = await app.inject({
      method: 'POST',
      url: '/api/anything',
      headers: { 'x-service-client-release': 'run-events-v1:other' }
    })
    t.equal(res.statusCode, 404, `release ${commit ?? 'dev'}`)
  }
})
