import { createHash } from 'node:crypto'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { DEV_USER } from '../../src/auth/dev-org.js'
import { rowsOf } from '../../src/db/client.js'
import { sessionCookieOf, signIn, signUp, uniqueEmail } from '../helper.js'
import { buildAuthApp } from './group.js'

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex')
const DAY = 24 * 60 * 60 * 1000

// cache off: these tests move expiry dates under the service's feet
const app = await buildAuthApp(t, {
  env: { ALLOW_DEV_ORG: 'false', IDENTITY_CACHE_MS: '0', AUTH_RATE_LIMIT_PER_IP: '100000' }
})

async function rows<T>(query: ReturnType<typeof sql>): Promise<T[]> {
  return rowsOf<T>(await app.db.execute(query))
}

const session = (cookie?: string, extra: Record<string, string> = {}) =>
  app.inject({ method: 'GET', url: '/api/auth/session', headers: { ...(cookie ? { cookie } : {}), ...extra } })

t.test('sign-up: 201 {user}, a hardened cookie, only the token hash stored, argon2id', async (t) => {
  const email = uniqueEmail('Mixed.Case')
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-up',
    payload: { email, password: 'a good long password', name: 'Ada' }
  })
  t.equal(res.statusCode, 201)
  const { user } = res.json()
  t.same(Object.keys(user).sort(), ['createdAt', 'email', 'id', 'name'], 'no password hash leaves the server')
  t.equal(user.email, email.toLowerCase())
  t.notMatch(res.body, /argon2/)

  const header = String(res.headers['set-cookie'])
  t.match(header, /^cairn_session=[a-z2-7]{40};/)
  t.match(header, /HttpOnly/)
  t.match(header, /SameSite=Lax/)
  t.match(header, /Path=\//)
  t.match(header, /Expires=/)
  t.notMatch(header, /Domain=/i, 'no Domain attribute')
  t.notMatch(header, /Secure/, 'not Secure outside production (plain http in development)')

  const { token } = sessionCookieOf(res)
  t.ok(token.length * 5 >= 160, 'at least 160 random bits')
  const stored = await rows<{ id: string; user_id: string }>(
    sql`select id, user_id from sessions where user_id = ${user.id}`
  )
  t.same(stored, [{ id: sha256(token), user_id: user.id }], 'the row holds SHA-256 of the token, never the token')
  const [hash] = await rows<{ password_hash: string }>(sql`select password_hash from users where id = ${user.id}`)
  t.match(hash!.password_hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$/)
  t.notMatch(hash!.password_hash, /a good long password/)
})

t.test('sign-up refuses a taken email (any case) with 409 conflict', async (t) => {
  const email = uniqueEmail('taken')
  await signUp(app, { email })
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-up',
    payload: { email: email.toUpperCase(), password: 'another password', name: 'X' }
  })
  t.equal(res.statusCode, 409)
  t.equal(res.json().error, 'conflict')
  t.equal(res.headers['set-cookie'], undefined)
})

t.test('password rules: 8 to 256 characters, used whole', async (t) => {
  const attempt = (password: string) =>
    app.inject({ method: 'POST', url: '/api/auth/sign-up', payload: { email: uniqueEmail('pw'), password, name: 'P' } })
  const seven = await attempt('1234567')
  t.equal(seven.statusCode, 400)
  t.equal(seven.json().error, 'validation_failed')
  t.match(seven.json().details, [{ path: '/body/password' }])

  t.equal((await attempt('12345678')).statusCode, 201, '8 characters accepted')

  const before = (await rows<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n
  const huge = await attempt('x'.repeat(10 * 1024))
  t.equal(huge.statusCode, 400, '10 KB is refused')
  t.equal(huge.json().error, 'validation_failed', 'by the schema, before the handler: no hashing cost spent')
  t.equal((await attempt('y'.repeat(257))).statusCode, 400, '257 characters refused')
  t.equal((await rows<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n, before, 'nothing was created')

  // 100 characters, a different ending beyond 72 bytes (where bcrypt would truncate)
  const long = 'p'.repeat(90) + 'ending-one'
  const email = uniqueEmail('long')
  await signUp(app, { email, password: long })
  const wrongTail = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email, password: 'p'.repeat(90) + 'ending-two' }
  })
  t.equal(wrongTail.statusCode, 401, 'no truncation: the tail counts')
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/sign-in', payload: { email, password: long } })).statusCode,
    200
  )

  const max = 'é'.repeat(256)
  const maxEmail = uniqueEmail('max')
  await signUp(app, { email: maxEmail, password: max })
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/sign-in', payload: { email: maxEmail, password: max } }))
      .statusCode,
    200,
    '256 non-ASCII characters'
  )
})

t.test('sign-in: one answer for an unknown email, a wrong password and the dev user', async (t) => {
  const user = await signUp(app)
  const wrong = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email: user.user.email, password: 'not the password' }
  })
  const unknown = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email: uniqueEmail('nobody'), password: 'not the password' }
  })
  const dev = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email: DEV_USER.email, password: 'not the password' }
  })
  for (const res of [wrong, unknown, dev]) {
    t.equal(res.statusCode, 401)
    t.equal(res.headers['set-cookie'], undefined)
  }
  t.same(wrong.json(), { error: 'invalid_credentials', message: 'wrong email or password' })
  t.equal(unknown.body, wrong.body, 'same body, byte for byte')
  t.equal(dev.body, wrong.body, 'the password-less dev user can never sign in')

  const ok = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email: user.user.email.toUpperCase(), password: user.password }
  })
  t.equal(ok.statusCode, 200, 'emails compare case-insensitively')
  t.same(ok.json().user, user.user)
})

t.test('session fixation: sign-in always issues a new token and kills the one presented', async (t) => {
  const first = await signUp(app)
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    headers: { cookie: first.cookie },
    payload: { email: first.user.email, password: first.password }
  })
  t.equal(res.statusCode, 200)
  const second = sessionCookieOf(res)
  t.not(second.token, first.token, 'a new token')
  t.equal((await session(first.cookie)).statusCode, 401, 'the old cookie is dead')
  t.equal((await session(second.cookie)).statusCode, 200)

  // a second device signing in does not end the first one's session
  const third = await signIn(app, first.user.email, first.password)
  t.equal((await session(second.cookie)).statusCode, 200)
  t.equal((await session(third.cookie)).statusCode, 200)
})

t.test('GET /api/auth/session', async (t) => {
  const user = await signUp(app)
  const res = await session(user.cookie)
  t.equal(res.statusCode, 200)
  const body = res.json()
  t.same(body.user, user.user)
  t.equal(body.session.activeOrganizationId, null)
  t.same(body.organizations, [])
  const expires = Date.parse(body.session.expiresAt)
  t.ok(Math.abs(expires - (Date.now() + 30 * DAY)) < 60_000, 'expires in 30 days')

  for (const cookie of [
    undefined,
    'cairn_session=',
    'cairn_session=nonsense',
    `cairn_session=${'a'.repeat(40)}`,
    `cairn_session=${user.token}x`
  ]) {
    const anon = await session(cookie)
    t.equal(anon.statusCode, 401, String(cookie))
    t.same(anon.json(), { error: 'unauthorized', message: 'sign in or send an API key' })
  }
  const withBearer = await session(user.cookie, { authorization: 'Bearer cairn_nope' })
  t.equal(withBearer.statusCode, 401, 'a bearer header never falls back to the cookie')
})

t.test('sign-out deletes the session: replaying the cookie is a 401', async (t) => {
  const user = await signUp(app)
  const res = await app.inject({ method: 'POST', url: '/api/auth/sign-out', headers: { cookie: user.cookie } })
  t.equal(res.statusCode, 204)
  t.equal(res.body, '')
  t.match(
    String(res.headers['set-cookie']),
    /^cairn_session=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/,
    'the cookie is cleared'
  )
  t.same(await rows(sql`select id from sessions where id = ${sha256(user.token)}`), [], 'the row is gone')
  t.equal((await session(user.cookie)).statusCode, 401, 'replay is refused')
  const again = await app.inject({ method: 'POST', url: '/api/auth/sign-out', headers: { cookie: user.cookie } })
  t.equal(again.statusCode, 204, 'signing out twice is harmless')
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/sign-out' })).statusCode,
    204,
    'and so is signing out with no session'
  )
})

t.test('expiry: a session past expires_at is a 401', async (t) => {
  const user = await signUp(app)
  await app.db.execute(
    sql`update sessions set expires_at = now() - interval '1 second' where id = ${sha256(user.token)}`
  )
  t.equal((await session(user.cookie)).statusCode, 401)
})

t.test("signing in sweeps away the user's expired sessions", async (t) => {
  const user = await signUp(app)
  await app.db.execute(sql`update sessions set expires_at = now() - interval '1 day' where id = ${sha256(user.token)}`)
  const fresh = await signIn(app, user.user.email, user.password)
  const left = await rows<{ id: string }>(sql`select id from sessions where user_id = ${user.user.id}`)
  t.same(left, [{ id: sha256(fresh.token) }])
})

t.test('sliding: used in its last 15 days, a session is extended to 30 and the cookie re-sent', async (t) => {
  const user = await signUp(app)
  const id = sha256(user.token)
  await app.db.execute(sql`update sessions set expires_at = now() + interval '20 days' where id = ${id}`)
  const early = await session(user.cookie)
  t.equal(early.statusCode, 200)
  t.equal(early.headers['set-cookie'], undefined, 'with 20 days left nothing changes')
  const [unchanged] = await rows<{ expires_at: Date }>(sql`select expires_at from sessions where id = ${id}`)
  t.ok(new Date(unchanged!.expires_at).getTime() < Date.now() + 21 * DAY)

  await app.db.execute(sql`update sessions set expires_at = now() + interval '10 days' where id = ${id}`)
  const late = await session(user.cookie)
  t.equal(late.statusCode, 200)
  t.match(
    String(late.headers['set-cookie']),
    new RegExp(`^cairn_session=${user.token};`),
    'the same token, a new expiry'
  )
  const [slid] = await rows<{ expires_at: Date }>(sql`select expires_at from sessions where id = ${id}`)
  t.ok(Math.abs(new Date(slid!.expires_at).getTime() - (Date.now() + 30 * DAY)) < 60_000, 'pushed to 30 days from now')
  t.ok(Math.abs(Date.parse(late.json().session.expiresAt) - (Date.now() + 30 * DAY)) < 60_000)
})

t.test('bad input on the auth routes is a clear 4xx and creates nothing', async (t) => {
  const before = (await rows<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n
  const post = (url: string, payload: string, type = 'application/json') =>
    app.inject({ method: 'POST', url, headers: { 'content-type': type }, payload })
  const cases: Array<[string, string, number, string]> = [
    ['/api/auth/sign-up', '{"email": ', 400, 'invalid_json'],
    ['/api/auth/sign-up', '{"email":"a@b.co","password":"12345678","name":"x","admin":true}', 400, 'validation_failed'],
    ['/api/auth/sign-up', '{"email":"not-an-email","password":"12345678","name":"x"}', 400, 'validation_failed'],
    ['/api/auth/sign-up', '{"email":"a@b.co","password":12345678,"name":"x"}', 400, 'validation_failed'],
    ['/api/auth/sign-up', '{"email":"a@b.co","password":"12345678","name":""}', 400, 'validation_failed'],
    [
      '/api/auth/sign-up',
      '{"email":"a@b.co","password":"12345678","name":"x","__proto__":{"admin":true}}',
      400,
      'invalid_json'
    ],
    ['/api/auth/sign-up', 'email=a@b.co', 415, 'unsupported_media_type'],
    ['/api/auth/sign-in', '[]', 400, 'validation_failed'],
    ['/api/auth/sign-in', '{"email":"a@b.co"}', 400, 'validation_failed'],
    [
      '/api/auth/sign-in',
      JSON.stringify({ email: 'a@b.co', password: 'x'.repeat(2 * 1024 * 1024) }),
      413,
      'payload_too_large'
    ]
  ]
  for (const [url, payload, status, error] of cases) {
    const res = await post(
      url,
      payload,
      payload.startsWith('email=') ? 'application/x-www-form-urlencoded' : 'application/json'
    )
    t.equal(res.statusCode, status, `${url} ${payload.slice(0, 60)}`)
    t.equal(res.json().error, error)
    t.type(res.json().message, 'string')
  }
  t.equal((await rows<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n, before)
})

t.test('production: __Host-cairn_session, Secure; the plain name is not accepted', async (t) => {
  const prod = await buildAuthApp(t, { env: { NODE_ENV: 'production' } })
  const res = await prod.inject({
    method: 'POST',
    url: '/api/auth/sign-up',
    payload: { email: uniqueEmail('prod'), password: 'a good long password', name: 'P' }
  })
  t.equal(res.statusCode, 201)
  const header = String(res.headers['set-cookie'])
  t.match(header, /^__Host-cairn_session=[a-z2-7]{40};/)
  t.match(header, /Secure/)
  t.match(header, /HttpOnly/)
  t.match(header, /SameSite=Lax/)
  t.match(header, /Path=\//)
  t.notMatch(header, /Domain=/i)
  const { cookie, token } = sessionCookieOf(res)
  t.equal((await prod.inject({ method: 'GET', url: '/api/auth/session', headers: { cookie } })).statusCode, 200)
  const plain = await prod.inject({
    method: 'GET',
    url: '/api/auth/session',
    headers: { cookie: `cairn_session=${token}` }
  })
  t.equal(plain.statusCode, 401, 'a cookie without the __Host- prefix could have been planted by a subdomain')
})
