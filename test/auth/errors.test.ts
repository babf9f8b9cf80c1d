import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { addMember, buildTestApp, mintKey, signUp, signUpWithOrg } from '../helper.js'
import { withProbes } from './probes.js'

const app = await buildTestApp(t, {
  env: { ALLOW_DEV_ORG: 'false', AUTH_RATE_LIMIT_PER_ACCOUNT: '2', CORS_ORIGINS: 'https://app.example.com' },
  ...withProbes
})

t.test('every auth error identifier, from a real request', async (t) => {
  const owner = await signUpWithOrg(app)
  const { authorization, id: keyId } = await mintKey(app, owner.cookie)
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const lonely = await signUp(app)

  const expect = async (name: string, res: { statusCode: number; json(): unknown }, status: number, error: string) => {
    t.equal(res.statusCode, status, name)
    const body = res.json() as { error: string; message: string }
    t.equal(body.error, error, name)
    t.type(body.message, 'string', `${name}: a message`)
    return body
  }

  await expect(
    '401 unauthorized: anonymous, dev-org access off',
    await app.inject({ url: '/api/probe/whoami' }),
    401,
    'unauthorized'
  )
  await expect(
    '401: an unknown bearer key',
    await app.inject({ url: '/api/runs', headers: { authorization: 'Bearer cairn_unknown' } }),
    401,
    'unauthorized'
  )
  await expect(
    '401: a key off the allowlist',
    await app.inject({ url: '/api/probe/whoami', headers: { authorization } }),
    401,
    'unauthorized'
  )
  await expect(
    '403 no_organization',
    await app.inject({ url: '/api/probe/whoami', headers: { cookie: lonely.cookie } }),
    403,
    'no_organization'
  )
  await expect(
    '403 user_required',
    await app.inject({ url: '/api/probe/key-user', headers: { authorization } }),
    403,
    'user_required'
  )
  await expect(
    '403 organization_admin_required',
    await app.inject({ url: '/api/keys', headers: { cookie: member.cookie } }),
    403,
    'organization_admin_required'
  )
  await expect(
    '403 session_required: mint',
    await app.inject({ method: 'POST', url: '/api/keys', headers: { authorization }, payload: { name: 'k' } }),
    403,
    'session_required'
  )
  await expect(
    '403 session_required: revoke',
    await app.inject({ method: 'DELETE', url: `/api/keys/${keyId}`, headers: { authorization } }),
    403,
    'session_required'
  )
  await expect(
    '403 forbidden_origin',
    await app.inject({
      method: 'POST',
      url: '/api/keys',
      headers: { cookie: owner.cookie, origin: 'https://evil.com' },
      payload: { name: 'k' }
    }),
    403,
    'forbidden_origin'
  )
  await expect(
    '401 invalid_credentials',
    await app.inject({
      method: 'POST',
      url: '/api/auth/sign-in',
      payload: { email: owner.user.email, password: 'wrong password' }
    }),
    401,
    'invalid_credentials'
  )
  await expect(
    '409 conflict',
    await app.inject({
      method: 'POST',
      url: '/api/auth/sign-up',
      payload: { email: owner.user.email, password: 'whatever123', name: 'x' }
    }),
    409,
    'conflict'
  )
  await expect(
    '404 not_found',
    await app.inject({
      method: 'DELETE',
      url: '/api/keys/0190b8f0-0000-7000-8000-000000000000',
      headers: { cookie: owner.cookie }
    }),
    404,
    'not_found'
  )
  await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email: owner.user.email, password: 'wrong password' }
  })
  const limited = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-in',
    payload: { email: owner.user.email, password: 'wrong password' }
  })
  await expect('429 rate_limited', limited, 429, 'rate_limited')
  t.ok(limited.headers['retry-after'])

  const origin = await expect(
    '400: POST /api/runs with a client-supplied origin',
    await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'hi', origin: 'web' }
    }),
    400,
    'server_owned_field'
  )
  t.match(origin.message, /origin/)
})

t.test('server-owned fields: refused on every /api route by one hook, before validation', async (t) => {
  const owner = await signUpWithOrg(app)
  for (const field of ['org_id', 'orgId', 'user_id', 'userId', 'origin']) {
    for (const [url, headers, payload] of [
      ['/api/probe/echo', { cookie: owner.cookie }, { [field]: 'x', fine: 1 }],
      ['/api/runs', { cookie: owner.cookie }, { prompt: 'p', [field]: 'x' }],
      ['/api/auth/organizations', { cookie: owner.cookie }, { name: 'n', [field]: 'x' }],
      ['/api/auth/sign-up', {}, { email: 'x@example.test', password: 'long enough', name: 'x', [field]: owner.org.id }],
      ['/api/keys', { cookie: owner.cookie }, { name: 'k', [field]: null }]
    ] as const) {
      const res = await app.inject({ method: 'POST', url, headers, payload })
      t.equal(res.statusCode, 400, `${field} on ${url}`)
      t.same(res.json(), { error: 'server_owned_field', message: `${field} is set by the server and may not be sent` })
    }
  }
  t.equal(
    rowsOf<{ n: number }>(
      await app.db.execute(sql`select count(*)::int as n from api_keys where org_id = ${owner.org.id}`)
    )[0]!.n,
    0,
    'nothing was written'
  )
  t.equal(rowsOf(await app.db.execute(sql`select id from users where email = 'x@example.test'`)).length, 0)

  const nested = await app.inject({
    method: 'POST',
    url: '/api/probe/echo',
    headers: { cookie: owner.cookie },
    payload: { meta: { orgId: 'x' }, list: [{ userId: 1 }] }
  })
  t.equal(nested.statusCode, 200, "only the top level is reserved; nested data is the handler's")
  const lookalike = await app.inject({
    method: 'POST',
    url: '/api/probe/echo',
    headers: { cookie: owner.cookie },
    payload: { OrgId: 1, origins: [] }
  })
  t.equal(lookalike.statusCode, 200, 'exact names only')
  const array = await app.inject({
    method: 'POST',
    url: '/api/probe/echo',
    headers: { cookie: owner.cookie },
    payload: [{ orgId: 'x' }]
  })
  t.equal(array.statusCode, 200, 'a top-level array has no fields')
  const key = await mintKey(app, owner.cookie)
  const viaKey = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { authorization: key.authorization },
    payload: { prompt: 'p', orgId: 'other' }
  })
  t.equal(viaKey.statusCode, 400, 'a key gets the same answer')
  t.equal(viaKey.json().error, 'server_owned_field')
})
