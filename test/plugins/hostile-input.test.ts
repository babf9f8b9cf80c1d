import { count, eq } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { runs } from '../../src/runs/tables.js'
import { findHostileInput, MAX_DEPTH } from '../../plugins/hostile-input.js'
import { addFacts } from '../memory/helpers.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'

const nested = (depth: number): unknown => {
  let value: unknown = 'leaf'
  for (let i = 0; i < depth; i++) value = i % 2 === 0 ? { a: value } : [value]
  return value
}

t.test('findHostileInput names the first refused string, key or nesting as a JSON pointer', async (t) => {
  t.equal(findHostileInput({ a: ['ok', { 'b/c': 'x\u0000' }] })?.instancePath, '/a/1/b~1c')
  t.equal(findHostileInput({ a: 'x\u0000' })?.message, 'must not contain U+0000')
  t.match(findHostileInput({ a: '\ud800' })?.message, /lone surrogate/)
  t.match(findHostileInput({ a: 'x\udc00' })?.message, /lone surrogate/)
  t.equal(findHostileInput({ 'k\u0000': 1 })?.instancePath, '/k\\u0000', 'a refused key is written escaped')
  t.equal(findHostileInput({ a: '😀 \ud83d\ude00 é 中' }), null, 'paired surrogates are ordinary text')
  t.equal(findHostileInput(nested(MAX_DEPTH)), null, `${MAX_DEPTH} levels pass`)
  t.match(findHostileInput(nested(MAX_DEPTH + 1))?.message, /deeper than 64/)
  t.equal(findHostileInput(null), null)
  t.equal(findHostileInput(42), null)
})

t.test('the inputs that answered 500 are 400 validation_failed naming the field', async (t) => {
  const app = await buildTestApp(t)
  const owner = await signUpWithOrg(app)
  const [memoryItem] = await (async () => {
    await addFacts(app.db, DEV_ORG.id, 'org', '', ['a fact to edit'])
    const res = await app.inject({ method: 'GET', url: '/api/memory/browse' })
    return res.json().items as Array<{ id: string }>
  })()
  t.ok(memoryItem, 'a memory item exists')

  // as text: JSON.stringify itself overflows the stack on 4,500 levels
  const deep = `${'{"a":['.repeat(2250)}1${']}'.repeat(2250)}`
  const cases: Array<
    [
      string,
      { method: 'GET' | 'POST' | 'PATCH'; url: string; payload?: unknown; headers?: Record<string, string> },
      string
    ]
  > = [
    ['NUL in a run prompt', { method: 'POST', url: '/api/runs', payload: { prompt: 'hi\u0000there' } }, '/body/prompt'],
    [
      'NUL in a metadata key',
      { method: 'POST', url: '/api/runs', payload: { prompt: 'hi', metadata: { 'k\u0000': 1 } } },
      '/body/metadata/k\\u0000'
    ],
    [
      'NUL in a metadata value',
      { method: 'POST', url: '/api/runs', payload: { prompt: 'hi', metadata: { key: 'v\u0000' } } },
      '/body/metadata/key'
    ],
    [
      'a lone surrogate in metadata',
      { method: 'POST', url: '/api/runs', payload: { prompt: 'hi', metadata: { key: ['\ud800'] } } },
      '/body/metadata/key/0'
    ],
    [
      'metadata nested 4,500 deep',
      {
        method: 'POST',
        url: '/api/runs',
        headers: { 'content-type': 'application/json' },
        payload: `{"prompt":"hi","metadata":{"deep":${deep}}}`
      },
      `/body/metadata/deep${'/a/0'.repeat(31)}`
    ],
    [
      'NUL in a memory PATCH',
      { method: 'PATCH', url: `/api/memory/item/${memoryItem!.id}`, payload: { content: 'x\u0000' } },
      '/body/content'
    ],
    [
      'NUL in a sign-up name',
      {
        method: 'POST',
        url: '/api/auth/sign-up',
        payload: { email: 'nul@example.test', password: 'correct horse battery', name: 'a\u0000' }
      },
      '/body/name'
    ],
    [
      'NUL in a key name',
      { method: 'POST', url: '/api/keys', headers: { cookie: owner.cookie }, payload: { name: 'k\u0000' } },
      '/body/name'
    ],
    [
      'NUL in an org name',
      {
        method: 'POST',
        url: '/api/auth/organizations',
        headers: { cookie: owner.cookie },
        payload: { name: 'o\u0000' }
      },
      '/body/name'
    ],
    ['NUL in memory search q', { method: 'GET', url: '/api/memory/search?q=a%00b' }, '/querystring/q'],
    ['NUL in memory browse cursor', { method: 'GET', url: '/api/memory/browse?cursor=%00' }, '/querystring/cursor'],
    ['NUL in a path parameter', { method: 'GET', url: '/api/runs/a%00b' }, '/params/id']
  ]
  const [{ before }] = (await app.db.select({ before: count() }).from(runs).where(eq(runs.orgId, DEV_ORG.id))) as [
    { before: number }
  ]
  for (const [name, request, path] of cases) {
    const res = await app.inject(request as never)
    t.equal(res.statusCode, 400, name)
    const body = res.json()
    t.equal(body.error, 'validation_failed', name)
    t.equal(body.details?.[0]?.path, path, `${name}: details name ${path}`)
    t.notOk(res.body.includes('\\u0000') && !path.includes('\\u0000'), `${name}: no NUL echoed`)
    t.equal(res.headers['x-service-api-compat'], 'run-events-v1', `${name}: release headers`)
  }
  const [{ after }] = (await app.db.select({ after: count() }).from(runs).where(eq(runs.orgId, DEV_ORG.id))) as [
    { after: number }
  ]
  t.equal(after, before, 'no run was created')
})

t.test('64 levels of nesting and well-formed unicode are accepted', async (t) => {
  const app = await buildTestApp(t)
  // the body object is level 1, metadata level 2: 62 more fit
  const res = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: 'héllo 😀 中文', metadata: { deep: nested(62) } }
  })
  t.equal(res.statusCode, 201, res.body.slice(0, 300))
  const over = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: 'hi', metadata: { deep: nested(63) } }
  })
  t.equal(over.statusCode, 400)
  t.equal(over.json().error, 'validation_failed')
})
