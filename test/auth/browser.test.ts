import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { buildTestApp, mintKey, signUp, signUpWithOrg, uniqueEmail } from '../helper.js'

const FRONTEND = 'https://app.example.com'

t.test('CORS: credentials for CORS_ORIGINS only, the exact origin echoed, Vary: Origin', async (t) => {
  const app = await buildTestApp(t, { env: { CORS_ORIGINS: `${FRONTEND},http://localhost:5173` } })
  const preflight = (origin: string) =>
    app.inject({
      method: 'OPTIONS',
      url: '/api/keys',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' }
    })
  const ok = await preflight(FRONTEND)
  t.ok(ok.statusCode < 300, 'the preflight succeeds')
  t.equal(ok.headers['access-control-allow-origin'], FRONTEND)
  t.equal(ok.headers['access-control-allow-credentials'], 'true')
  t.match(String(ok.headers.vary), /Origin/)
  t.equal((await preflight('http://localhost:5173')).headers['access-control-allow-origin'], 'http://localhost:5173')
  for (const origin of [
    'null',
    'https://evil.com',
    `${FRONTEND}.evil.com`,
    'http://app.example.com',
    'https://app.example.com:8443',
    'https://APP.example.com '
  ]) {
    const res = await preflight(origin)
    t.equal(res.headers['access-control-allow-origin'], undefined, `no allow header for ${origin}`)
  }
  const get = await app.inject({ method: 'GET', url: '/api/health', headers: { origin: FRONTEND } })
  t.equal(get.headers['access-control-allow-origin'], FRONTEND)
  t.equal(get.headers['access-control-allow-credentials'], 'true')
  t.match(String(get.headers.vary), /Origin/)
  const evil = await app.inject({ method: 'GET', url: '/api/health', headers: { origin: 'https://evil.com' } })
  t.equal(evil.headers['access-control-allow-origin'], undefined)

  const none = await buildTestApp(t)
  const off = await none.inject({
    method: 'OPTIONS',
    url: '/api/keys',
    headers: { origin: FRONTEND, 'access-control-request-method': 'POST' }
  })
  t.equal(off.headers['access-control-allow-origin'], undefined, 'no CORS_ORIGINS: no cross-origin access at all')
})

t.test('Origin check: cookie-carrying writes from a foreign origin are 403 forbidden_origin', async (t) => {
  const app = await buildTestApp(t, { env: { CORS_ORIGINS: FRONTEND, ALLOW_DEV_ORG: 'false' } })
  const owner = await signUpWithOrg(app)
  const { id: keyId, authorization } = await mintKey(app, owner.cookie)
  const orgCount = async () =>
    rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from organizations`))[0]!.n
  const before = await orgCount()
  const createOrg = (headers: Record<string, string>) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/organizations',
      headers: { cookie: owner.cookie, host: 'api.example.com', ...headers },
      payload: { name: `o ${Math.random()}` }
    })

  for (const origin of [
    'https://evil.com',
    `${FRONTEND}.evil.com`,
    'https://trusted.com.evil.com',
    'http://app.example.com',
    'null',
    'https://api.example.com',
    'http://api.example.com:8080'
  ]) {
    const res = await createOrg({ origin })
    t.equal(res.statusCode, 403, origin)
    t.equal(res.json().error, 'forbidden_origin', origin)
  }
  const crossSite = await createOrg({ 'sec-fetch-site': 'cross-site' })
  t.equal(crossSite.statusCode, 403, 'no Origin, but the browser says cross-site')
  t.equal(await orgCount(), before, 'nothing was created')

  t.equal((await createOrg({ origin: FRONTEND })).statusCode, 201, 'a CORS_ORIGINS origin passes')
  t.equal((await createOrg({ origin: 'http://api.example.com' })).statusCode, 201, "the service's own origin passes")
  t.equal((await createOrg({ 'sec-fetch-site': 'same-origin' })).statusCode, 201, 'same-origin without Origin passes')
  t.equal((await createOrg({})).statusCode, 201, 'no browser headers at all (curl) passes')

  const read = await app.inject({
    method: 'GET',
    url: '/api/keys',
    headers: { cookie: owner.cookie, origin: 'https://evil.com' }
  })
  t.equal(read.statusCode, 200, 'GET is unaffected')

  for (const [method, url, payload] of [
    ['DELETE', `/api/keys/${keyId}`, undefined],
    ['POST', '/api/keys', { name: 'csrf' }],
    ['POST', '/api/auth/sign-out', undefined],
    ['PATCH', `/api/auth/organizations/${owner.org.id}/members/${owner.user.id}`, { role: 'member' }]
  ] as const) {
    const res = await app.inject({
      method,
      url,
      headers: { cookie: owner.cookie, origin: 'https://evil.com' },
      ...(payload ? { payload } : {})
    })
    t.equal(res.statusCode, 403, `${method} ${url}`)
    t.equal(res.json().error, 'forbidden_origin')
  }
  t.equal((await app.inject({ method: 'GET', url: '/api/runs-missing', headers: { authorization } })).statusCode, 404)
  const keys = rowsOf<{ revoked_at: unknown }>(
    await app.db.execute(sql`select revoked_at from api_keys where org_id = ${owner.org.id}`)
  )
  t.same(keys, [{ revoked_at: null }], 'the key was not revoked, none minted')
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/auth/session', headers: { cookie: owner.cookie } })).statusCode,
    200,
    'not signed out'
  )

  const loginCsrf = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    headers: { origin: 'https://evil.com' },
    payload: { email: owner.user.email, password: owner.password }
  })
  t.equal(loginCsrf.statusCode, 403, 'no login CSRF either')
  t.equal(loginCsrf.headers['set-cookie'], undefined)
})

t.test(
  "security headers everywhere: the API set on /api, helmet's page set elsewhere; /docs keeps working under its own CSP",
  async (t) => {
    const app = await buildTestApp(t)
    const res = await app.inject({ method: 'GET', url: '/api/health' })
    t.equal(res.headers['x-content-type-options'], 'nosniff')
    t.equal(res.headers['cache-control'], 'no-store', 'tenant data stays out of caches')
    t.match(String(res.headers['content-security-policy']), /default-src 'none'/)
    t.match(String(res.headers['content-security-policy']), /frame-ancestors 'none'/, 'framing is refused by the CSP')
    t.equal(res.headers['strict-transport-security'], undefined, 'no HSTS over plain http (RFC 6797, 7.2)')
    for (const pageOnly of [
      'x-frame-options',
      'x-xss-protection',
      'x-dns-prefetch-control',
      'x-download-options',
      'origin-agent-cluster',
      'referrer-policy',
      'x-permitted-cross-domain-policies'
    ]) {
      t.equal(res.headers[pageOnly], undefined, `${pageOnly} is for pages, not JSON`)
    }
    t.equal(res.headers['x-powered-by'], undefined)
    t.ok(res.headers['x-request-id'])
    t.ok(res.headers['x-service-release-fingerprint'], 'the release headers ride with them')
    const err = await app.inject({ method: 'GET', url: '/api/nope' })
    t.equal(err.headers['x-content-type-options'], 'nosniff', 'errors too')
    t.equal(err.headers['cache-control'], 'no-store')
    const refused = await app.inject({
      method: 'POST',
      url: '/api/runs',
      payload: '{not json',
      headers: { 'content-type': 'application/json' }
    })
    t.equal(refused.statusCode, 400)
    t.equal(refused.headers['x-content-type-options'], 'nosniff', 'and refusals')

    const docs = await app.inject({ method: 'GET', url: '/docs/' })
    t.equal(docs.statusCode, 200)
    const csp = String(docs.headers['content-security-policy'])
    t.match(csp, /script-src 'self'/, 'the page may load its own scripts')
    t.match(csp, /style-src 'self'/)
    t.notMatch(csp, /default-src 'none'/)
    t.equal(docs.headers['x-frame-options'], 'SAMEORIGIN', "a page gets helmet's full set")
    t.equal(docs.headers['referrer-policy'], 'no-referrer')
    t.equal(docs.headers['strict-transport-security'], undefined)
    t.equal(docs.headers['x-service-release-fingerprint'], undefined, 'release headers are for /api only')
    const script = await app.inject({ method: 'GET', url: '/docs/static/swagger-initializer.js' })
    t.equal(script.statusCode, 200)
    t.equal((await app.inject({ method: 'GET', url: '/docs/json' })).statusCode, 200)
    const spec = await app.inject({ method: 'GET', url: '/openapi.json' })
    t.equal(spec.headers['x-content-type-options'], 'nosniff')
    t.equal(spec.headers['x-frame-options'], 'SAMEORIGIN')
  }
)

t.test(
  'Strict-Transport-Security over https: TLS reported by a trusted proxy, never by an untrusted one',
  async (t) => {
    const proxied = await buildTestApp(t, { env: { TRUST_PROXY: '127.0.0.1' } })
    const https = { 'x-forwarded-proto': 'https' }
    const api = await proxied.inject({ method: 'GET', url: '/api/health', headers: https })
    t.equal(api.headers['strict-transport-security'], 'max-age=31536000; includeSubDomains')
    t.equal(api.headers['cache-control'], 'no-store', 'with the rest of the API set')
    const docs = await proxied.inject({ method: 'GET', url: '/docs/', headers: https })
    t.equal(docs.headers['strict-transport-security'], 'max-age=31536000; includeSubDomains')
    t.equal(
      (await proxied.inject({ method: 'GET', url: '/api/health' })).headers['strict-transport-security'],
      undefined,
      'plain http behind the proxy'
    )
    const untrusted = await proxied.inject({
      method: 'GET',
      url: '/api/health',
      headers: https,
      remoteAddress: '203.0.113.9'
    })
    t.equal(untrusted.headers['strict-transport-security'], undefined, 'a client cannot claim https for itself')
    const direct = await buildTestApp(t)
    t.equal(
      (await direct.inject({ method: 'GET', url: '/api/health', headers: https })).headers['strict-transport-security'],
      undefined,
      'TRUST_PROXY off'
    )
  }
)

t.test(
  'sign-in and sign-up are rate-limited per account and per address: 429 rate_limited with Retry-After',
  async (t) => {
    const app = await buildTestApp(t, {
      env: { AUTH_RATE_LIMIT_PER_ACCOUNT: '3', AUTH_RATE_LIMIT_PER_IP: '8', AUTH_RATE_LIMIT_WINDOW_MS: '60000' }
    })
    const victim = await signUp(app) // 1 attempt from 127.0.0.1
    const signIn = (
      email: string,
      password: string,
      remoteAddress = '10.1.1.1',
      headers: Record<string, string> = {}
    ) => app.inject({ method: 'POST', url: '/api/auth/sign-in', remoteAddress, headers, payload: { email, password } })

    for (let i = 0; i < 3; i++)
      t.equal((await signIn(victim.user.email, 'wrong password!', `10.0.0.${i + 1}`)).statusCode, 401)
    const locked = await signIn(victim.user.email, 'wrong password!', '10.0.0.9')
    t.equal(locked.statusCode, 429, 'the account is locked after repeated failures, from any address')
    t.same(Object.keys(locked.json()).sort(), ['error', 'message'])
    t.equal(locked.json().error, 'rate_limited')
    t.ok(
      Number(locked.headers['retry-after']) > 0 && Number(locked.headers['retry-after']) <= 60,
      'Retry-After in seconds'
    )
    const right = await signIn(victim.user.email.toUpperCase(), victim.password, '10.0.0.10')
    t.equal(right.statusCode, 429, 'even with the right password, until the window passes')
    t.equal(right.headers['set-cookie'], undefined)

    // per address: 8 attempts, whatever the accounts; a forged X-Forwarded-For changes nothing (TRUST_PROXY off)
    for (let i = 0; i < 8; i++) {
      const res = await signIn(uniqueEmail('spray'), 'some password', '10.2.2.2', {
        'x-forwarded-for': `203.0.113.${i}`
      })
      t.equal(res.statusCode, 401)
    }
    const sprayed = await signIn(uniqueEmail('spray'), 'some password', '10.2.2.2', {
      'x-forwarded-for': '198.51.100.7'
    })
    t.equal(sprayed.statusCode, 429)
    t.equal(sprayed.json().error, 'rate_limited')
    t.ok(sprayed.headers['retry-after'])
    const signUpSpray = await app.inject({
      method: 'POST',
      url: '/api/auth/sign-up',
      remoteAddress: '10.2.2.2',
      payload: { email: uniqueEmail(), password: 'long enough', name: 'x' }
    })
    t.equal(signUpSpray.statusCode, 429, 'sign-up shares the per-address budget')
    const badBody = await app.inject({
      method: 'POST',
      url: '/api/auth/sign-in',
      remoteAddress: '10.2.2.2',
      payload: '{',
      headers: { 'content-type': 'application/json' }
    })
    t.equal(badBody.statusCode, 429, 'counted before the body is even parsed')

    const elsewhere = await signIn(uniqueEmail('other'), 'some password', '10.3.3.3')
    t.equal(elsewhere.statusCode, 401, 'another address is unaffected')
    const fine = await signUp(app)
    t.ok(fine.cookie, 'and so is everyone else')
  }
)

t.test('behind a trusted proxy, X-Forwarded-For names the client', async (t) => {
  const app = await buildTestApp(t, {
    env: { TRUST_PROXY: '127.0.0.1', AUTH_RATE_LIMIT_PER_IP: '2', AUTH_RATE_LIMIT_PER_ACCOUNT: '100' }
  })
  const attempt = (client: string) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/sign-in',
      remoteAddress: '127.0.0.1',
      headers: { 'x-forwarded-for': client },
      payload: { email: uniqueEmail(), password: 'some password' }
    })
  t.equal((await attempt('203.0.113.1')).statusCode, 401)
  t.equal((await attempt('203.0.113.1')).statusCode, 401)
  t.equal((await attempt('203.0.113.1')).statusCode, 429)
  t.equal((await attempt('203.0.113.2')).statusCode, 401, 'a different client behind the same proxy has its own budget')
})

t.test('a route-level rate limit answers the same 429 rate_limited too', async (t) => {
  const app = await buildTestApp(t, {
    apiPlugins: [
      async (api) => {
        api.get(
          '/probe/limited',
          { config: { scope: 'public', rateLimit: { max: 1, timeWindow: 60_000 } } },
          async () => ({ ok: true })
        )
      }
    ]
  })
  t.equal((await app.inject({ url: '/api/probe/limited' })).statusCode, 200)
  const res = await app.inject({ url: '/api/probe/limited' })
  t.equal(res.statusCode, 429)
  t.same(Object.keys(res.json()).sort(), ['error', 'message'])
  t.equal(res.json().error, 'rate_limited')
  t.ok(Number(res.headers['retry-after']) >= 1)
})
