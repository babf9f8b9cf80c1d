import cookie from '@fastify/cookie'
import Fastify from 'fastify'
import t from 'tap'
import securityHeaders from '../../plugins/security-headers.js'
import shutdownRefusals from '../../plugins/shutdown.js'
import dbPlugin from '../../plugins/db.js'
import errorsPlugin from '../../plugins/errors.js'
import principalPlugin, { isLoopback, realUserId, type Scope } from '../../src/auth/principal.js'
import { DEV_ORG, DEV_USER } from '../../src/auth/dev-org.js'
import { createTestDatabase, type Teardown } from '../helper.js'

/** A bare Fastify with the shared plugins and one route per scope, to test scopes alone. */
async function scopedApp(t: Teardown, allowDevOrg: boolean) {
  const { database } = await createTestDatabase(t)
  const app = Fastify()
  await app.register(errorsPlugin)
  // the shutdown's budget (plugins/shutdown.ts), which the principal plugin's close hook goes through
  await app.register(securityHeaders, { apiHeaders: {} })
  await app.register(shutdownRefusals, { graceMs: 10_000 })
  await app.register(dbPlugin, { database, closeOnShutdown: false })
  await app.register(cookie)
  await app.register(
    async (api) => {
      await api.register(principalPlugin, { allowDevOrg, secureCookie: false, cacheTtlMs: 0 })
      const scopes: Array<[string, Scope | Scope[] | undefined]> = [
        ['default', undefined],
        ['org', 'org'],
        ['public', 'public'],
        ['user', 'user'],
        ['admin', 'admin'],
        ['session', 'session'],
        ['admin-session', ['admin', 'session']]
      ]
      for (const [name, scope] of scopes) {
        api.get(`/${name}`, { config: { scope, keyAccess: 'none' } }, async (request) => ({
          principal: request.principal,
          realUser: realUserId(request.principal)
        }))
      }
    },
    { prefix: '/api' }
  )
  t.teardown(() => app.close())
  return app
}

t.test('dev-org access off: every non-public route is 401 unauthorized', async (t) => {
  const app = await scopedApp(t, false)
  for (const name of ['default', 'org', 'user', 'admin', 'session', 'admin-session']) {
    const res = await app.inject({ method: 'GET', url: `/api/${name}` })
    t.equal(res.statusCode, 401, name)
    t.same(res.json(), { error: 'unauthorized', message: 'sign in or send an API key' }, name)
  }
  const open = await app.inject({ method: 'GET', url: '/api/public' })
  t.equal(open.statusCode, 200)
  t.same(open.json(), { principal: null, realUser: null }, 'public routes resolve nobody')
})

t.test('dev-org access on: the seeded dev org and fallback user, never a real user', async (t) => {
  const app = await scopedApp(t, true)
  const res = await app.inject({ method: 'GET', url: '/api/default' })
  t.equal(res.statusCode, 200)
  t.same(res.json(), {
    principal: { kind: 'dev', orgId: DEV_ORG.id, userId: DEV_USER.id, role: 'owner' },
    realUser: null
  })
  t.equal((await app.inject({ method: 'GET', url: '/api/admin' })).statusCode, 200, 'the dev org is its own admin')
  t.equal((await app.inject({ method: 'GET', url: '/api/session' })).statusCode, 200)
  const user = await app.inject({ method: 'GET', url: '/api/user' })
  t.equal(user.statusCode, 403)
  t.equal(user.json().error, 'user_required')
})

t.test('an unknown bearer token never falls back to the dev org', async (t) => {
  const app = await scopedApp(t, true)
  for (const authorization of ['Bearer cairn_unknown', 'Bearer ', 'Basic Zm9vOmJhcg==']) {
    const res = await app.inject({ method: 'GET', url: '/api/org', headers: { authorization } })
    t.equal(res.statusCode, 401, authorization)
    t.equal(res.json().error, 'unauthorized')
  }
})

t.test('isLoopback: 127.0.0.0/8, ::1 and IPv4-mapped 127.x only', async (t) => {
  for (const ip of ['127.0.0.1', '127.255.3.4', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', '::ffff:7f00:1'])
    t.ok(isLoopback(ip), ip)
  for (const ip of [
    '10.0.0.1',
    '192.0.2.2',
    '128.0.0.1',
    '::ffff:10.0.0.1',
    'fe80::1',
    '::',
    '0.0.0.0',
    'localhost',
    '',
    '127.0.0.1.nip.io',
    '0127.0.0.1',
    '127.1',
    '127.000.0.1',
    '127.0.0.1 '
  ])
    t.notOk(isLoopback(ip), ip)
})

t.test('dev-org access on: a caller from another address gets 401 as if it were off', async (t) => {
  const app = await scopedApp(t, true)
  for (const remoteAddress of ['203.0.113.7', '10.0.0.1', '::ffff:10.0.0.1', 'fe80::1', '2001:db8::1']) {
    for (const name of ['default', 'org', 'admin', 'session', 'admin-session']) {
      const res = await app.inject({ method: 'GET', url: `/api/${name}`, remoteAddress })
      t.equal(res.statusCode, 401, `${remoteAddress} ${name}`)
      t.same(res.json(), { error: 'unauthorized', message: 'sign in or send an API key' })
    }
    t.equal(
      (await app.inject({ method: 'GET', url: '/api/public', remoteAddress })).statusCode,
      200,
      'public routes still answer'
    )
  }
  for (const remoteAddress of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1']) {
    const res = await app.inject({ method: 'GET', url: '/api/default', remoteAddress })
    t.equal(res.statusCode, 200, remoteAddress)
    t.equal(res.json().principal.kind, 'dev')
  }
})

t.test('a present but dead session cookie is 401 and cleared, never the dev org', async (t) => {
  const app = await scopedApp(t, true)
  const unknown = `cairn_session=${'a'.repeat(40)}`
  for (const cookie of [unknown, 'cairn_session=not-a-token', 'cairn_session=', `other=1; ${unknown}`]) {
    for (const name of ['default', 'org', 'session', 'user']) {
      const res = await app.inject({ method: 'GET', url: `/api/${name}`, headers: { cookie } })
      t.equal(res.statusCode, 401, `${cookie} ${name}`)
      t.same(res.json(), { error: 'unauthorized', message: 'sign in or send an API key' })
      const cleared = res.cookies.find((c) => c.name === 'cairn_session')
      t.ok(cleared, 'the cookie is cleared')
      t.equal(cleared!.value, '')
      t.ok(cleared!.expires!.getTime() <= Date.now(), 'expired at once')
      t.match(cleared, { path: '/', httpOnly: true, sameSite: 'Lax' }, 'with the attributes it was set with')
    }
  }
  const other = await app.inject({ method: 'GET', url: '/api/default', headers: { cookie: 'unrelated=1' } })
  t.equal(other.statusCode, 200, 'another cookie alone is no session cookie: the dev fallback')
  t.equal(other.headers['set-cookie'], undefined)
})

t.test('dev-org access on: a loopback caller asking for a foreign host name (DNS rebinding) gets 401', async (t) => {
  const app = await scopedApp(t, true)
  for (const host of ['evil.example:3000', 'evil.example', '192.0.2.2:3000', '[2001:db8::1]:3000']) {
    const res = await app.inject({ method: 'GET', url: '/api/default', headers: { host } })
    t.equal(res.statusCode, 401, host)
  }
  for (const host of [
    'localhost:3000',
    'LOCALHOST',
    'app.localhost:3000',
    '127.0.0.1:3000',
    '127.0.0.2',
    '[::1]:3000'
  ]) {
    const res = await app.inject({ method: 'GET', url: '/api/default', headers: { host } })
    t.equal(res.statusCode, 200, host)
  }
})
