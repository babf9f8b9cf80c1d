import { Type } from 'typebox'
import t from 'tap'
import { ApiError } from '../../plugins/errors.js'
import { StrictObject } from '../../schemas/common.js'
import { buildTestApp, type Teardown } from '../helper.js'

const Body = StrictObject({
  name: Type.String({ minLength: 1, maxLength: 20 }),
  count: Type.Optional(Type.Integer({ minimum: 0 }))
})

async function appWithProbeRoutes(t: Teardown, env = {}) {
  const seen: unknown[] = []
  const app = await buildTestApp(t, {
    env: { BODY_LIMIT: '2048', ...env },
    extend: (app) => {
      app.post('/api/probe', { config: { scope: 'public' }, schema: { body: Body } }, async (request) => {
        seen.push(request.body)
        return { ok: true }
      })
      app.get('/api/probe/boom', { config: { scope: 'public' } }, async () => {
        throw new Error('connection to 10.0.0.5 failed: SELECT secret FROM users')
      })
      app.get('/api/probe/typed', { config: { scope: 'public' } }, async () => {
        throw new ApiError(409, 'conflict', 'that name is taken', { headers: { 'retry-after': '1' } })
      })
    }
  })
  return { app, seen }
}

t.test('malformed, mistyped and unknown input is a 400 and reaches no handler', async (t) => {
  const { app, seen } = await appWithProbeRoutes(t)
  const post = (payload: string, type = 'application/json') =>
    app.inject({ method: 'POST', url: '/api/probe', headers: { 'content-type': type }, payload })

  const malformed = await post('{"name": ')
  t.equal(malformed.statusCode, 400)
  t.equal(malformed.json().error, 'invalid_json')
  t.type(malformed.json().message, 'string')

  const empty = await post('')
  t.equal(empty.statusCode, 400)
  t.equal(empty.json().error, 'invalid_json')

  const wrongType = await post('{"name": 42}')
  t.equal(wrongType.statusCode, 400)
  t.same(wrongType.json().error, 'validation_failed')
  t.match(wrongType.json().details, [{ path: '/body/name', message: /string/ }])

  const numberAsString = await post('{"name": "a", "count": "3"}')
  t.equal(numberAsString.statusCode, 400, 'bodies are not type-coerced')

  const missing = await post('{}')
  t.equal(missing.statusCode, 400)
  t.match(missing.json().details, [{ path: '/body/name' }])

  const unknown = await post('{"name": "a", "admin": true}')
  t.equal(unknown.statusCode, 400)
  t.match(unknown.json().details, [{ path: '/body/admin' }])

  const proto = await post('{"name": "a", "__proto__": {"polluted": true}}')
  t.equal(proto.statusCode, 400)
  t.equal(proto.json().error, 'invalid_json')
  t.equal(({} as Record<string, unknown>).polluted, undefined)

  const ctor = await post('{"name": "a", "constructor": {"prototype": {"polluted": true}}}')
  t.equal(ctor.statusCode, 400)

  const array = await post('[1,2,3]')
  t.equal(array.statusCode, 400)

  const wrongMedia = await post('name=a', 'application/x-www-form-urlencoded')
  t.equal(wrongMedia.statusCode, 415)
  t.equal(wrongMedia.json().error, 'unsupported_media_type')

  const tooBig = await post(JSON.stringify({ name: 'a'.repeat(5000) }))
  t.equal(tooBig.statusCode, 413)
  t.equal(tooBig.json().error, 'payload_too_large')

  t.same(seen, [], 'no handler ran')
  const fine = await post('{"name": "a"}')
  t.equal(fine.statusCode, 200)
  t.same(seen, [{ name: 'a' }])
})

t.test('5xx bodies hide internals', async (t) => {
  const { app } = await appWithProbeRoutes(t)
  const res = await app.inject({ method: 'GET', url: '/api/probe/boom' })
  t.equal(res.statusCode, 500)
  t.same(res.json(), { error: 'internal_error', message: 'internal error' })
  t.notMatch(res.body, /SELECT|10\.0\.0\.5|at /)
  t.ok(res.headers['x-request-id'], 'the request id is there to find the log line')
})

t.test('typed errors keep their identifier and headers', async (t) => {
  const { app } = await appWithProbeRoutes(t)
  const res = await app.inject({ method: 'GET', url: '/api/probe/typed' })
  t.equal(res.statusCode, 409)
  t.same(res.json(), { error: 'conflict', message: 'that name is taken' })
  t.equal(res.headers['retry-after'], '1')
})

t.test('unknown paths are JSON 404s, inside and outside /api', async (t) => {
  const { app } = await appWithProbeRoutes(t)
  for (const url of ['/api/nope', '/api', '/nope', '/api/health/extra']) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 404, url)
    t.equal(res.json().error, 'not_found', url)
    t.type(res.json().message, 'string')
  }
})
