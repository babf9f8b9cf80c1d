import { sql } from 'drizzle-orm'
import t from 'tap'
import { mintKey as mintKeyRow } from '../../src/auth/api-keys-repo.js'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { rowsOf } from '../../src/db/client.js'
import { buildTestApp, createTestDatabase, secondHandle, signUp, signUpWithOrg } from '../helper.js'

/**
 * Dev-org access on the whole app: the dev org serves loopback callers only, mints no keys,
 * keys of the dev org die with dev access, and a dead session cookie is a 401.
 */

const REMOTE = '203.0.113.7'
/** org-scoped routes of several groups, each a plain GET */
const ORG_ROUTES = ['/api/runs', '/api/threads', '/api/tools/policies', '/api/keys', '/api/memory/captures']

t.test(
  'dev org on: loopback callers act in it, any other address gets 401 (TRUST_PROXY resolves the address)',
  async (t) => {
    const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
    for (const url of ORG_ROUTES) {
      t.equal((await app.inject({ url })).statusCode, 200, `${url} from loopback`)
      const remote = await app.inject({ url, remoteAddress: REMOTE })
      t.equal(remote.statusCode, 401, `${url} from ${REMOTE}`)
      t.same(remote.json(), { error: 'unauthorized', message: 'sign in or send an API key' })
    }
    const write = await app.inject({
      method: 'POST',
      url: '/api/runs',
      remoteAddress: '10.0.0.9',
      payload: { prompt: 'hi' }
    })
    t.equal(write.statusCode, 401, 'no remote writes either')
    t.same(
      rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from runs`))[0]!.n,
      0,
      'nothing was written'
    )
    t.equal(
      (await app.inject({ url: '/api/runs', headers: { 'x-forwarded-for': REMOTE } })).statusCode,
      200,
      'without TRUST_PROXY a forwarded address is ignored: the peer is loopback'
    )

    const proxied = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'true', TRUST_PROXY: '127.0.0.1' } })
    const forwarded = await proxied.inject({ url: '/api/runs', headers: { 'x-forwarded-for': REMOTE } })
    t.equal(forwarded.statusCode, 401, "behind a trusted proxy the client address counts, not the proxy's")
    t.equal((await proxied.inject({ url: '/api/runs', headers: { 'x-forwarded-for': '127.0.0.1' } })).statusCode, 200)
    t.equal(
      (
        await proxied.inject({
          url: '/api/runs',
          remoteAddress: '198.51.100.1',
          headers: { 'x-forwarded-for': '127.0.0.1' }
        })
      ).statusCode,
      401,
      'an untrusted peer cannot claim to be loopback'
    )
  }
)

t.test('GET /api/config tells each caller whether the dev org is open to it', async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  t.equal((await app.inject({ url: '/api/config' })).json().allowDevOrg, true)
  t.equal((await app.inject({ url: '/api/config', remoteAddress: '::1' })).json().allowDevOrg, true)
  t.equal((await app.inject({ url: '/api/config', remoteAddress: REMOTE })).json().allowDevOrg, false)
  const off = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'false' } })
  t.equal((await off.inject({ url: '/api/config' })).json().allowDevOrg, false)
})

t.test('the dev principal cannot mint API keys: 403 user_required, nothing stored', async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const res = await app.inject({ method: 'POST', url: '/api/keys', payload: { name: 'dev key' } })
  t.equal(res.statusCode, 403)
  t.same(res.json(), { error: 'user_required', message: 'this route needs a signed-in user' })
  t.same(rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from api_keys`))[0]!.n, 0)
  // a signed-in owner still mints
  const owner = await signUpWithOrg(app)
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/keys', headers: { cookie: owner.cookie }, payload: { name: 'k' } }))
      .statusCode,
    201
  )
  // the dev org is no member of anything and has no session: the session routes refuse it too
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/organizations', payload: { name: 'x' } })).statusCode,
    401
  )
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: `/api/auth/organizations/${DEV_ORG.id}/members`,
        payload: { email: 'a@b.test', role: 'owner' }
      })
    ).statusCode,
    401
  )
})

t.test('a key of the dev org stops working when the service restarts with ALLOW_DEV_ORG=false', async (t) => {
  const shared = await createTestDatabase(t)
  const devOn = await buildTestApp(t, { db: shared, env: { ALLOW_DEV_ORG: 'true' } })
  // as an older release let the dev principal mint it
  const { key } = await mintKeyRow(devOn.db, DEV_ORG.id, null, 'minted by the dev org')
  const authorization = `Bearer ${key}`
  t.equal(
    (await devOn.inject({ url: '/api/runs', headers: { authorization } })).statusCode,
    200,
    'dev access on, loopback: it works'
  )
  const remote = await devOn.inject({ url: '/api/runs', headers: { authorization }, remoteAddress: REMOTE })
  t.equal(remote.statusCode, 401, 'only where the dev fallback would work')

  const devOff = await buildTestApp(t, { db: await secondHandle(t, shared), env: { ALLOW_DEV_ORG: 'false' } })
  const refused = await devOff.inject({ url: '/api/runs', headers: { authorization } })
  t.equal(refused.statusCode, 401)
  t.same(refused.json(), { error: 'unauthorized', message: 'sign in or send an API key' })
  t.equal(
    (await devOff.inject({ method: 'POST', url: '/api/runs', headers: { authorization }, payload: { prompt: 'hi' } }))
      .statusCode,
    401
  )

  // keys of real orgs are untouched by the rule
  const owner = await signUpWithOrg(devOff)
  const real = await devOff.inject({
    method: 'POST',
    url: '/api/keys',
    headers: { cookie: owner.cookie },
    payload: { name: 'k' }
  })
  const realAuth = `Bearer ${real.json().key}`
  t.equal(
    (await devOff.inject({ url: '/api/runs', headers: { authorization: realAuth }, remoteAddress: REMOTE })).statusCode,
    200
  )
})

t.test('a dead session cookie is 401 and clears itself, with the dev org on', async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'true', IDENTITY_CACHE_MS: '0' } })
  const signedOut = await signUpWithOrg(app)
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/sign-out', headers: { cookie: signedOut.cookie } })).statusCode,
    204
  )
  const expired = await signUpWithOrg(app)
  await app.db.execute(
    sql`update sessions set expires_at = now() - interval '1 day' where user_id = ${expired.user.id}`
  )
  const cases: Array<[string, string]> = [
    ['signed out', signedOut.cookie],
    ['expired', expired.cookie],
    ['unknown', `cairn_session=${'Z'.repeat(40)}`],
    ['malformed', 'cairn_session=%00%ff']
  ]
  for (const [what, cookie] of cases) {
    for (const [method, url] of [
      ['GET', '/api/runs'],
      ['GET', '/api/keys'],
      ['POST', '/api/runs'],
      ['GET', '/api/auth/session']
    ] as const) {
      const res = await app.inject({
        method,
        url,
        headers: { cookie },
        ...(method === 'POST' ? { payload: { prompt: 'x' } } : {})
      })
      t.equal(res.statusCode, 401, `${what}: ${method} ${url}`)
      t.equal(res.json().error, 'unauthorized')
      t.match(
        String(res.headers['set-cookie']),
        /^cairn_session=; .*Expires=Thu, 01 Jan 1970 00:00:00 GMT/,
        `${what}: ${method} ${url} clears the cookie`
      )
    }
  }
  t.same(
    rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from runs`))[0]!.n,
    0,
    'nothing ran in the dev org'
  )
  // a live cookie of a user without an org is still 403 no_organization, not the dev org
  const orgless = await signUp(app)
  const res = await app.inject({ url: '/api/runs', headers: { cookie: orgless.cookie } })
  t.equal(res.statusCode, 403)
  t.equal(res.json().error, 'no_organization')
  t.equal(res.headers['set-cookie'], undefined, 'a live cookie stays')
})
