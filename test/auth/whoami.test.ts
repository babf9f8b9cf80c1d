import t from 'tap'
import { signUp, signUpWithOrg } from '../helper.js'
import { buildAuthApp } from './group.js'

// GET /api/auth/whoami: the console's first question, answered 200 for every kind of browser
// (GET /api/auth/session keeps its 401 without a session).

const REMOTE = '203.0.113.7'
const whoami = (
  app: Awaited<ReturnType<typeof buildAuthApp>>,
  opts: { cookie?: string; remoteAddress?: string; headers?: Record<string, string> } = {}
) =>
  app.inject({
    method: 'GET',
    url: '/api/auth/whoami',
    remoteAddress: opts.remoteAddress,
    headers: { ...(opts.cookie ? { cookie: opts.cookie } : {}), ...opts.headers }
  })

const nobody = { user: null, session: null, organizations: [] }

t.test('no session: the dev org on loopback, anonymous elsewhere or with dev access off; 200 each time', async (t) => {
  const app = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const dev = await whoami(app)
  t.equal(dev.statusCode, 200)
  t.same(dev.json(), { kind: 'dev', ...nobody })
  t.equal(dev.headers['set-cookie'], undefined, 'no cookie set')
  const remote = await whoami(app, { remoteAddress: REMOTE })
  t.equal(remote.statusCode, 200)
  t.same(remote.json(), { kind: 'anonymous', ...nobody }, 'the dev org serves loopback callers only')
  // GET /api/auth/session is unchanged: no session is a 401
  t.equal((await app.inject({ method: 'GET', url: '/api/auth/session' })).statusCode, 401)

  const off = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'false' } })
  const anonymous = await whoami(off)
  t.equal(anonymous.statusCode, 200)
  t.same(anonymous.json(), { kind: 'anonymous', ...nobody })
})

t.test('a live session: the same user, session and organizations as GET /api/auth/session', async (t) => {
  const app = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const owner = await signUpWithOrg(app)
  const res = await whoami(app, { cookie: owner.cookie })
  t.equal(res.statusCode, 200)
  const session = (
    await app.inject({ method: 'GET', url: '/api/auth/session', headers: { cookie: owner.cookie } })
  ).json()
  t.same(res.json(), { kind: 'user', ...session })
  t.same(res.json().organizations, [{ id: owner.org.id, name: owner.org.name, slug: owner.org.slug, role: 'owner' }])

  const fresh = await signUp(app)
  const noOrg = (await whoami(app, { cookie: fresh.cookie })).json()
  t.equal(noOrg.kind, 'user', 'a person with no organization is still a person')
  t.equal(noOrg.session.activeOrganizationId, null)
  t.same(noOrg.organizations, [])
})

t.test('a dead cookie is anonymous, never the dev org, and is cleared', async (t) => {
  const app = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'true', IDENTITY_CACHE_MS: '0' } })
  const user = await signUp(app)
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/sign-out', headers: { cookie: user.cookie } })).statusCode,
    204
  )
  for (const cookie of [user.cookie, 'cairn_session=nonsense']) {
    const res = await whoami(app, { cookie })
    t.equal(res.statusCode, 200, cookie)
    t.same(res.json(), { kind: 'anonymous', ...nobody })
    t.match(
      String(res.headers['set-cookie']),
      /^cairn_session=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/,
      'the cookie is cleared'
    )
  }
})

t.test('a bearer header is refused, as on GET /api/auth/session', async (t) => {
  const app = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const owner = await signUpWithOrg(app)
  const res = await whoami(app, { cookie: owner.cookie, headers: { authorization: 'Bearer cairn_nope' } })
  t.equal(res.statusCode, 401)
  t.same(res.json(), { error: 'unauthorized', message: 'sign in or send an API key' })
})
