import { createHash, randomBytes } from 'node:crypto'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { addMember, mintKey, signUp, signUpWithOrg } from '../helper.js'
import { buildAuthApp } from './group.js'

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex')
const UNAUTHORIZED = { error: 'unauthorized', message: 'sign in or send an API key' }

const app = await buildAuthApp(t, { env: { ALLOW_DEV_ORG: 'false' } })
const rows = async <T>(query: ReturnType<typeof sql>) => rowsOf<T>(await app.db.execute(query))
const call = (authorization: string, url = '/api/probe/key-org', extra: Record<string, string> = {}) =>
  app.inject({ method: 'GET', url, headers: { authorization, ...extra } })

t.test('minting: cairn_ + 43 base64url characters, shown once, only its hash stored', async (t) => {
  const owner = await signUpWithOrg(app)
  const res = await app.inject({
    method: 'POST',
    url: '/api/keys',
    headers: { cookie: owner.cookie },
    payload: { name: 'ci' }
  })
  t.equal(res.statusCode, 201)
  t.equal(res.headers['cache-control'], 'no-store')
  const minted = res.json()
  t.same(Object.keys(minted).sort(), ['createdAt', 'id', 'key', 'last4', 'name'])
  t.match(minted.key, /^cairn_[A-Za-z0-9_-]{43}$/)
  t.equal(Buffer.from(minted.key.slice(6), 'base64url').length, 32, '256 random bits')
  t.equal(minted.last4, minted.key.slice(-4))
  const stored = await rows<Record<string, unknown>>(sql`select * from api_keys where id = ${minted.id}`)
  t.equal(stored.length, 1)
  t.equal(stored[0]!.key_hash, sha256(minted.key))
  t.equal(stored[0]!.org_id, owner.org.id)
  t.equal(stored[0]!.created_by, owner.user.id)
  t.notMatch(JSON.stringify(stored), minted.key.slice(6), 'no plaintext in the row')

  const list = await app.inject({ method: 'GET', url: '/api/keys', headers: { cookie: owner.cookie } })
  t.equal(list.statusCode, 200)
  t.same(list.json(), {
    items: [
      {
        id: minted.id,
        name: 'ci',
        last4: minted.last4,
        createdAt: minted.createdAt,
        lastUsedAt: null,
        revokedAt: null,
        createdBy: owner.user.id
      }
    ]
  })
  t.notMatch(list.body, minted.key.slice(6), 'never shown again')

  for (const payload of [{}, { name: '' }, { name: 'x'.repeat(101) }, { name: 'k', orgId: 'other' }, { name: 3 }]) {
    const bad = await app.inject({ method: 'POST', url: '/api/keys', headers: { cookie: owner.cookie }, payload })
    t.equal(bad.statusCode, 400, JSON.stringify(payload))
  }
  t.equal((await rows(sql`select id from api_keys where org_id = ${owner.org.id}`)).length, 1, 'nothing else minted')
})

t.test('a key acts for its org, with no real user, only on the allowlist', async (t) => {
  const owner = await signUpWithOrg(app)
  const { authorization, id } = await mintKey(app, owner.cookie)
  const res = await call(authorization)
  t.equal(res.statusCode, 200)
  t.same(res.json(), {
    principal: { kind: 'key', orgId: owner.org.id, userId: null, role: 'member', keyId: id },
    realUser: null
  })
  t.equal((await call(authorization.replace('Bearer', 'bearer'))).statusCode, 200, 'the scheme is case-insensitive')

  const userScoped = await call(authorization, '/api/probe/key-user')
  t.equal(userScoped.statusCode, 403, 'allowlisted but user-scoped')
  t.equal(userScoped.json().error, 'user_required')

  for (const url of ['/api/probe/whoami', '/api/probe/admin', '/api/probe/user', '/api/keys']) {
    const off = await call(authorization, url)
    t.equal(off.statusCode, 401, `${url} is off the allowlist`)
    t.equal(off.json().error, 'unauthorized')
  }
  const head = await app.inject({ method: 'HEAD', url: '/api/probe/key-org', headers: { authorization } })
  t.equal(head.statusCode, 200, 'HEAD follows GET')
  const echo = await app.inject({
    method: 'POST',
    url: '/api/probe/echo',
    headers: { authorization },
    payload: { a: 1 }
  })
  t.equal(echo.statusCode, 401, 'writes off the allowlist')

  const mint = await app.inject({
    method: 'POST',
    url: '/api/keys',
    headers: { authorization },
    payload: { name: 'child' }
  })
  t.equal(mint.statusCode, 403)
  t.same(mint.json(), { error: 'session_required', message: 'this route needs a signed-in session, not an API key' })
  const revoke = await app.inject({ method: 'DELETE', url: `/api/keys/${id}`, headers: { authorization } })
  t.equal(revoke.statusCode, 403)
  t.equal(revoke.json().error, 'session_required')
  t.equal((await rows(sql`select id from api_keys where org_id = ${owner.org.id}`)).length, 1, 'a key minted nothing')
  t.equal((await call(authorization)).statusCode, 200, 'and revoked nothing')

  for (const url of ['/api/auth/session', '/api/auth/organizations']) {
    const session = await app.inject({ method: 'GET', url, headers: { authorization } })
    t.equal(session.statusCode, 401, `${url}: a key is not a session`)
  }
})

t.test('a bearer header never falls back to the cookie', async (t) => {
  const owner = await signUpWithOrg(app)
  const other = await signUpWithOrg(app)
  const { authorization } = await mintKey(app, other.cookie)
  const bad = await app.inject({
    method: 'GET',
    url: '/api/probe/key-org',
    headers: { authorization: 'Bearer cairn_nope', cookie: owner.cookie }
  })
  t.equal(bad.statusCode, 401)
  t.same(bad.json(), UNAUTHORIZED)
  const both = await app.inject({
    method: 'GET',
    url: '/api/probe/key-org',
    headers: { authorization, cookie: owner.cookie }
  })
  t.equal(both.json().principal.orgId, other.org.id, "the key's org, not the cookie's")
  const empty = await app.inject({
    method: 'GET',
    url: '/api/probe/whoami',
    headers: { authorization: '', cookie: owner.cookie }
  })
  t.equal(empty.statusCode, 401, 'even an empty Authorization header')
})

t.test('unknown, malformed and revoked keys: 401 with one identical body', async (t) => {
  const owner = await signUpWithOrg(app)
  const { authorization, key, id } = await mintKey(app, owner.cookie)
  t.equal((await call(authorization)).statusCode, 200)
  const revoked = await app.inject({ method: 'DELETE', url: `/api/keys/${id}`, headers: { cookie: owner.cookie } })
  t.equal(revoked.statusCode, 204)
  const bodies = new Set<string>()
  const headers = [
    authorization, // revoked, on the very next request
    `Bearer cairn_${randomBytes(32).toString('base64url')}`, // right prefix, random bytes
    `Bearer sk_${key.slice(6)}`, // wrong prefix
    `Bearer ${key.slice(0, -1)}`, // too short
    `Bearer ${key}A`, // too long
    `Bearer ${key.slice(0, -1)}!`,
    'Bearer',
    'Bearer ',
    'Bearer  ',
    `Basic ${Buffer.from('a:b').toString('base64')}`,
    key,
    'Bearer a b'
  ]
  for (const h of headers) {
    const res = await call(h)
    t.equal(res.statusCode, 401, h)
    bodies.add(res.body)
  }
  t.same([...bodies], [JSON.stringify(UNAUTHORIZED)], 'one body for all')

  const again = await app.inject({ method: 'DELETE', url: `/api/keys/${id}`, headers: { cookie: owner.cookie } })
  t.equal(again.statusCode, 204, 'revoking twice is fine')
  const list = await app.inject({ method: 'GET', url: '/api/keys', headers: { cookie: owner.cookie } })
  t.type(list.json().items[0].revokedAt, 'string', 'revoked, not deleted')
  const unknown = await app.inject({
    method: 'DELETE',
    url: '/api/keys/0190b8f0-0000-7000-8000-000000000000',
    headers: { cookie: owner.cookie }
  })
  t.equal(unknown.statusCode, 404)
  t.equal(unknown.json().error, 'not_found')
  const hostile = await app.inject({
    method: 'DELETE',
    url: '/api/keys/..%2F..%2Fetc',
    headers: { cookie: owner.cookie }
  })
  t.equal(hostile.statusCode, 400)
})

t.test('members cannot mint, list or revoke keys', async (t) => {
  const owner = await signUpWithOrg(app)
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const { id } = await mintKey(app, owner.cookie)
  for (const [method, url] of [
    ['POST', '/api/keys'],
    ['GET', '/api/keys'],
    ['DELETE', `/api/keys/${id}`]
  ] as const) {
    const res = await app.inject({
      method,
      url,
      headers: { cookie: member.cookie },
      ...(method === 'POST' ? { payload: { name: 'x' } } : {})
    })
    t.equal(res.statusCode, 403, `${method} ${url}`)
    t.equal(res.json().error, 'organization_admin_required')
  }
  const admin = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, admin.user.email, 'admin')
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/keys', headers: { cookie: admin.cookie } })).statusCode,
    200,
    'an admin can'
  )
  t.same(await rows(sql`select revoked_at from api_keys where id = ${id} and revoked_at is not null`), [])
})

t.test('lastUsedAt: set on use, written at most once a minute, across instances', async (t) => {
  const owner = await signUpWithOrg(app)
  const { authorization, id } = await mintKey(app, owner.cookie)
  const lastUsed = async () => {
    const value = (
      await rows<{ last_used_at: Date | string | null }>(sql`select last_used_at from api_keys where id = ${id}`)
    )[0]!.last_used_at
    return value === null ? null : new Date(value).getTime()
  }
  t.equal(await lastUsed(), null)
  await call(authorization)
  const first = await lastUsed()
  t.ok(first, 'set by the first use')
  for (let i = 0; i < 5; i++) await call(authorization)
  t.same(await lastUsed(), first, 'not rewritten within the minute')

  const second = await buildAuthApp(t, { db: app.testDb, env: { ALLOW_DEV_ORG: 'false' } })
  t.equal(
    (await second.inject({ method: 'GET', url: '/api/probe/key-org', headers: { authorization } })).statusCode,
    200
  )
  t.same(await lastUsed(), first, 'nor by another instance')

  await app.db.execute(sql`update api_keys set last_used_at = now() - interval '2 minutes' where id = ${id}`)
  const stale = await lastUsed()
  const third = await buildAuthApp(t, { db: app.testDb, env: { ALLOW_DEV_ORG: 'false' } })
  t.equal(
    (await third.inject({ method: 'GET', url: '/api/probe/key-org', headers: { authorization } })).statusCode,
    200
  )
  t.ok((await lastUsed())! > stale!, 'a minute later, the next use records itself again')
})

t.test('revocation reaches another instance at once (NOTIFY), not after its cache expires', async (t) => {
  const owner = await signUpWithOrg(app)
  const { authorization, id } = await mintKey(app, owner.cookie)
  // the second instance would keep a resolved key 10 s; only the broadcast can make it forget sooner
  const second = await buildAuthApp(t, {
    db: app.testDb,
    env: { ALLOW_DEV_ORG: 'false', IDENTITY_CACHE_MS: '10000' }
  })
  const viaSecond = () => second.inject({ method: 'GET', url: '/api/probe/key-org', headers: { authorization } })
  t.equal((await viaSecond()).statusCode, 200, 'cached there now')
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/keys/${id}`, headers: { cookie: owner.cookie } })).statusCode,
    204
  )
  let status = (await viaSecond()).statusCode
  // a notification crosses connections asynchronously; give it a moment, far below the 10 s cache
  for (let i = 0; i < 50 && status !== 401; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20))
    status = (await viaSecond()).statusCode
  }
  t.equal(status, 401)
})
