import { once } from 'node:events'
import { createServer } from 'node:net'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { addMember, mintKey, signUp, signUpWithOrg } from '../helper.js'
import { startFakeProvider } from './fake-provider.js'
import { buildProvidersApp } from './group.js'

const ALLOW_PRIVATE = { PROVIDER_ALLOW_PRIVATE: 'true', SECRETS_KEY: newKeyText() }

type App = Awaited<ReturnType<typeof buildProvidersApp>>

const providerRows = async (app: App, orgId: string) =>
  rowsOf<Record<string, unknown>>(
    await app.db.execute(
      sql`select id, name, base_url, models, ready, last_error from providers where org_id = ${orgId} order by id`
    )
  )
const secretRows = async (app: App, orgId: string) =>
  rowsOf<{ name: string; sealed: string }>(
    await app.db.execute(sql`select name, sealed from secrets where org_id = ${orgId} order by name`)
  )

/** A port nothing listens on (it was just released). */
async function closedPort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  await once(server, 'close')
  return port
}

t.test('create, list, check and delete; the key is a sealed internal secret and never answered', async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildProvidersApp(t, { env: ALLOW_PRIVATE })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const answers: string[] = []
  const call = async (
    method: 'GET' | 'POST' | 'DELETE',
    url: string,
    payload?: object,
    h: Record<string, string> = headers
  ) => {
    const res = await app.inject({ method, url, headers: h, ...(payload ? { payload } : {}) })
    answers.push(res.body)
    return res
  }

  const created = await call('POST', '/api/providers', { name: 'Fake', baseUrl: `${fake.baseUrl}/`, apiKey: fake.key })
  t.equal(created.statusCode, 201, created.body)
  const { provider } = created.json()
  t.match(provider, {
    name: 'Fake',
    baseUrl: fake.baseUrl,
    models: ['fake-small', 'fake-large'],
    ready: true,
    lastError: null,
    createdBy: owner.user.id
  })
  t.match(provider.lastCheckedAt, /^\d{4}-\d\d-\d\dT/)
  t.match(provider.createdAt, /^\d{4}-\d\d-\d\dT/)
  t.notOk('apiKey' in provider, 'no apiKey field')
  const probe = fake.requests.find((r) => r.path === '/v1/models')
  t.equal(probe?.authorization, `Bearer ${fake.key}`, 'the check sent the key to /models')

  // the key: one internal secret, sealed, under cairn:provider:<id>:api_key; not an org secret
  const secrets = await secretRows(app, owner.org.id)
  t.same(
    secrets.map((s) => s.name),
    [`cairn:provider:${provider.id}:api_key`]
  )
  t.notOk(secrets[0]!.sealed.includes(fake.key), 'sealed, not plain')
  t.notOk(Buffer.from(secrets[0]!.sealed, 'base64').toString('latin1').includes(fake.key), 'sealed, not encoded')
  t.same((await call('GET', '/api/secrets')).json().items, [], 'GET /api/secrets does not list it')

  const listed = await call('GET', '/api/providers')
  t.equal(listed.statusCode, 200)
  t.same(listed.json(), { items: [provider], nextCursor: null })

  // given models are kept as given after a check
  const given = await call('POST', '/api/providers', {
    name: 'Given',
    baseUrl: fake.baseUrl,
    apiKey: fake.key,
    models: ['fake-large']
  })
  t.equal(given.statusCode, 201)
  t.match(given.json().provider, { ready: true, models: ['fake-large'] })

  // paging: oldest first, a cursor to the next page
  const page1 = (await call('GET', '/api/providers?limit=1')).json()
  t.same(
    page1.items.map((p: { id: string }) => p.id),
    [provider.id]
  )
  t.type(page1.nextCursor, 'string')
  const page2 = (await call('GET', `/api/providers?limit=1&cursor=${page1.nextCursor}`)).json()
  t.same(
    page2.items.map((p: { id: string }) => p.id),
    [given.json().provider.id]
  )
  t.equal(page2.nextCursor, null)

  // a name is unique in the org
  const before = await providerRows(app, owner.org.id)
  const secretsBefore = await secretRows(app, owner.org.id)
  const clash = await call('POST', '/api/providers', { name: 'Fake', baseUrl: fake.baseUrl, apiKey: 'sk-other' })
  t.equal(clash.statusCode, 409)
  t.equal(clash.json().error, 'conflict')
  t.same(await providerRows(app, owner.org.id), before, 'nothing changed')
  t.same(await secretRows(app, owner.org.id), secretsBefore, 'no key left behind')

  // check again: the probe runs again and the answer is the provider
  const requestsBefore = fake.requests.length
  const checked = await call('POST', `/api/providers/${provider.id}/check`)
  t.equal(checked.statusCode, 200)
  t.match(checked.json().provider, { id: provider.id, ready: true, lastError: null })
  t.equal(fake.requests.length, requestsBefore + 1)

  // deleting removes the row and the key
  const deleted = await call('DELETE', `/api/providers/${provider.id}`)
  t.equal(deleted.statusCode, 204)
  t.same(
    (await secretRows(app, owner.org.id)).map((s) => s.name),
    [`cairn:provider:${given.json().provider.id}:api_key`]
  )
  t.same(
    (await call('GET', '/api/providers')).json().items.map((p: { id: string }) => p.id),
    [given.json().provider.id]
  )
  t.equal((await call('DELETE', `/api/providers/${provider.id}`)).statusCode, 404)
  t.equal((await call('POST', `/api/providers/${provider.id}/check`)).json().error, 'not_found')

  for (const body of answers) t.notOk(body.includes(fake.key), 'no answer carries the key')
})

t.test('a check tells a refused key from a wrong URL, and says what else went wrong', async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildProvidersApp(t, { env: ALLOW_PRIVATE })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const create = async (name: string, baseUrl: string, apiKey: string) => {
    const res = await app.inject({ method: 'POST', url: '/api/providers', headers, payload: { name, baseUrl, apiKey } })
    t.equal(res.statusCode, 201, `${name}: created even when the check fails`)
    return res.json().provider
  }

  const badKey = await create('bad key', fake.baseUrl, 'sk-wrong')
  t.match(badKey, { ready: false, models: [] })
  t.match(badKey.lastError, /API key/)
  t.match(badKey.lastError, /401/)
  t.notMatch(badKey.lastError, /URL/)
  t.notOk(JSON.stringify(badKey).includes('sk-wrong'))

  const wrongUrl = await create('wrong url', `http://127.0.0.1:${fake.port}/api`, fake.key)
  t.equal(wrongUrl.ready, false)
  t.match(wrongUrl.lastError, /URL/)
  t.match(wrongUrl.lastError, /404/)
  t.notMatch(wrongUrl.lastError, /API key/)

  const refused = await create('refused', `http://127.0.0.1:${await closedPort()}/v1`, fake.key)
  t.equal(refused.ready, false)
  t.match(refused.lastError, /connection refused/)

  fake.modelsMode = 'not-json'
  const notJson = await create('not json', fake.baseUrl, fake.key)
  t.equal(notJson.ready, false)
  t.match(notJson.lastError, /not JSON/)

  // fixed upstream: a check makes it ready, with the models it lists now
  fake.modelsMode = 'ok'
  const fixed = await app.inject({ method: 'POST', url: `/api/providers/${notJson.id}/check`, headers })
  t.match(fixed.json().provider, { ready: true, lastError: null, models: ['fake-small', 'fake-large'] })
  t.ok(Date.parse(fixed.json().provider.lastCheckedAt) >= Date.parse(notJson.lastCheckedAt))

  // and a key that stops working makes it not ready again, saying so
  fake.key = 'sk-rotated'
  const broken = (await app.inject({ method: 'POST', url: `/api/providers/${notJson.id}/check`, headers })).json()
    .provider
  t.match(broken, { ready: false, models: ['fake-small', 'fake-large'] })
  t.match(broken.lastError, /API key/)
})

t.test('a check that gets no answer in time says so', async (t) => {
  // accepts connections and never answers
  const silent = createServer(() => {})
  silent.listen(0, '127.0.0.1')
  await once(silent, 'listening')
  t.teardown(() => silent.close())
  const app = await buildProvidersApp(t, { env: { ...ALLOW_PRIVATE, PROVIDER_CHECK_TIMEOUT_MS: '300' } })
  const owner = await signUpWithOrg(app)
  const res = await app.inject({
    method: 'POST',
    url: '/api/providers',
    headers: { cookie: owner.cookie },
    payload: {
      name: 'silent',
      baseUrl: `http://127.0.0.1:${(silent.address() as { port: number }).port}/v1`,
      apiKey: 'sk-x'
    }
  })
  t.equal(res.statusCode, 201)
  t.match(res.json().provider, { ready: false, lastError: /did not answer .* within 0.3 s/ })
})

t.test('scopes: admins write, members read the list, API keys read only GET /api/models', async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildProvidersApp(t, { env: ALLOW_PRIVATE })
  const owner = await signUpWithOrg(app)
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const key = await mintKey(app, owner.cookie)
  const created = (
    await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key }
    })
  ).json().provider

  const asMember = { cookie: member.cookie }
  const memberCreate = await app.inject({
    method: 'POST',
    url: '/api/providers',
    headers: asMember,
    payload: { name: 'M', baseUrl: fake.baseUrl, apiKey: fake.key }
  })
  t.equal(memberCreate.statusCode, 403)
  t.equal(memberCreate.json().error, 'organization_admin_required')
  t.equal(
    (await app.inject({ method: 'POST', url: `/api/providers/${created.id}/check`, headers: asMember })).statusCode,
    403
  )
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/providers/${created.id}`, headers: asMember })).statusCode,
    403
  )
  const memberList = await app.inject({ method: 'GET', url: '/api/providers', headers: asMember })
  t.equal(memberList.statusCode, 200)
  t.same(
    memberList.json().items.map((p: { id: string }) => p.id),
    [created.id]
  )

  const asKey = { authorization: key.authorization }
  for (const [method, url] of [
    ['GET', '/api/providers'],
    ['POST', '/api/providers'],
    ['POST', `/api/providers/${created.id}/check`],
    ['DELETE', `/api/providers/${created.id}`]
  ] as const) {
    const res = await app.inject({
      method,
      url,
      headers: asKey,
      ...(method === 'POST' && url === '/api/providers'
        ? { payload: { name: 'K', baseUrl: fake.baseUrl, apiKey: 'x' } }
        : {})
    })
    t.equal(res.statusCode, 401, `${method} ${url} with a key`)
    t.equal(res.json().error, 'unauthorized')
  }
  const models = await app.inject({ method: 'GET', url: '/api/models', headers: asKey })
  t.equal(models.statusCode, 200)
  t.ok(
    models
      .json()
      .items.some((m: { id: string; providerId: string }) => m.id === 'fake-small' && m.providerId === created.id)
  )
  t.equal((await providerRows(app, owner.org.id)).length, 1, 'nothing was created or deleted by the refused calls')
})

t.test('bad input is a 400 naming the field and changes nothing', async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildProvidersApp(t, { env: ALLOW_PRIVATE })
  const owner = await signUpWithOrg(app)
  const good = { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key }
  const cases: Array<[string, unknown, string]> = [
    ['no key', { name: 'Fake', baseUrl: fake.baseUrl }, '/body/apiKey'],
    ['no name', { baseUrl: fake.baseUrl, apiKey: 'k' }, '/body/name'],
    ['blank name', { ...good, name: '   ' }, '/body/name'],
    ['empty key', { ...good, apiKey: '' }, '/body/apiKey'],
    ['a key with a non-ASCII character', { ...good, apiKey: 'sk-caf\u00e9' }, '/body/apiKey'],
    ['a key with a curly quote', { ...good, apiKey: '\u201csk-abc\u201d' }, '/body/apiKey'],
    ['a key with a space', { ...good, apiKey: 'sk abc' }, '/body/apiKey'],
    ['ftp', { ...good, baseUrl: 'ftp://127.0.0.1/v1' }, '/body/baseUrl'],
    ['not a URL', { ...good, baseUrl: 'http://' }, '/body/baseUrl'],
    ['credentials in the URL', { ...good, baseUrl: `http://user:pass@127.0.0.1:${fake.port}/v1` }, '/body/baseUrl'],
    ['a query', { ...good, baseUrl: `${fake.baseUrl}?key=x` }, '/body/baseUrl'],
    ['host that does not resolve', { ...good, baseUrl: 'http://no-such-host.invalid/v1' }, '/body/baseUrl'],
    ['empty models', { ...good, models: [] }, '/body/models'],
    ['duplicate models', { ...good, models: ['a', 'a'] }, '/body/models'],
    ['a model with spaces around', { ...good, models: [' a '] }, '/body/models/0'],
    ['unknown field', { ...good, extra: true }, '/body/extra'],
    ['server-owned field', { ...good, orgId: 'x' }, ''],
    ['models not an array', { ...good, models: 'fake-small' }, '/body/models']
  ]
  for (const [what, payload, path] of cases) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: payload as object
    })
    t.equal(res.statusCode, 400, `${what}: ${res.body}`)
    if (path !== '') {
      t.equal(res.json().error, 'validation_failed', what)
      t.ok(
        res.json().details.some((d: { path: string }) => d.path === path),
        `${what} names ${path}: ${res.body}`
      )
    }
  }
  t.same(await providerRows(app, owner.org.id), [], 'no provider')
  t.same(await secretRows(app, owner.org.id), [], 'no key')
  t.equal(fake.requests.length, 0, 'nothing reached the provider')
  const badId = await app.inject({
    method: 'POST',
    url: '/api/providers/not%20an%20id/check',
    headers: { cookie: owner.cookie }
  })
  t.equal(badId.statusCode, 400)
})

// the embedded database always has a key (made in DATA_DIR): this is Postgres without SECRETS_KEY
const embedded = !process.env.DATABASE_URL && 'the embedded database makes its own key; this runs on Postgres'
t.test(
  'without a secrets key (Postgres without SECRETS_KEY) creating answers 503 and stores nothing',
  { skip: embedded },
  async (t) => {
    const app = await buildProvidersApp(t, { env: { PROVIDER_ALLOW_PRIVATE: 'true' } })
    t.equal(app.secrets.ring, null, 'no key ring')
    const fake = await startFakeProvider(t)
    const owner = await signUpWithOrg(app)
    const res = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key }
    })
    t.equal(res.statusCode, 503)
    t.equal(res.json().error, 'secrets_unavailable')
    t.same(await providerRows(app, owner.org.id), [])
  }
)
