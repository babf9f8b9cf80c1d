import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { addMember, mintKey, signUp, signUpWithOrg } from '../helper.js'
import { startFakeGitHub } from './fake-github.js'
import { buildGitHubApp } from './group.js'

type App = Awaited<ReturnType<typeof buildGitHubApp>>

const connect = (app: App, cookie: string, token: unknown) =>
  app.inject({ method: 'PUT', url: '/api/integrations/github', headers: { cookie }, payload: { token } })

async function integrationRows(app: App, orgId: string) {
  return rowsOf<Record<string, unknown>>(
    await app.db.execute(
      sql`select kind, account, settings, connected_by, last_error from integrations where org_id = ${orgId}`
    )
  )
}
async function secretRows(app: App, orgId: string) {
  return rowsOf<{ name: string; sealed: string }>(
    await app.db.execute(sql`select name, sealed from secrets where org_id = ${orgId} order by name`)
  )
}

t.test('connect: the token is checked against GitHub, sealed under cairn:github:token, never returned', async (t) => {
  const github = await startFakeGitHub(t)
  const app = await buildGitHubApp(t, { env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText() } })
  const owner = await signUpWithOrg(app)
  const account = github.addAccount('octo-owner')

  const before = await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })
  t.same(
    before.json().items.find((i: { kind: string }) => i.kind === 'github'),
    { kind: 'github', connected: false, account: null, connectedAt: null, lastError: null }
  )

  const res = await connect(app, owner.cookie, account.token)
  t.equal(res.statusCode, 200, res.body)
  const { integration } = res.json()
  t.equal(integration.kind, 'github')
  t.equal(integration.connected, true)
  t.equal(integration.account, 'octo-owner')
  t.equal(integration.lastError, null)
  t.ok(Date.parse(integration.connectedAt))
  t.notMatch(res.body, account.token, 'the token is not in the answer')
  t.equal(github.count('/user', 200), 1, 'GitHub was asked who the token is')
  t.equal(github.log.at(-1)!.token, account.token)

  const listed = await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })
  t.same(
    listed.json().items.find((i: { kind: string }) => i.kind === 'github'),
    integration
  )
  t.notMatch(listed.body, account.token)

  const rows = await integrationRows(app, owner.org.id)
  t.equal(rows.length, 1)
  t.equal(rows[0]!.account, 'octo-owner')
  t.equal(rows[0]!.connected_by, owner.user.id)
  t.notMatch(JSON.stringify(rows), account.token, 'the integration row holds no token')
  const secrets = await secretRows(app, owner.org.id)
  t.same(
    secrets.map((s) => s.name),
    ['cairn:github:token'],
    'one internal secret'
  )
  t.notMatch(JSON.stringify(secrets), account.token, 'sealed: the token is not in the row')
  t.equal(await app.secrets.internal.open(owner.org.id, 'github:token'), account.token, 'and it opens')

  // the org's own secrets never show it
  const listedSecrets = await app.inject({ method: 'GET', url: '/api/secrets', headers: { cookie: owner.cookie } })
  t.same(listedSecrets.json().items, [], 'GET /api/secrets does not list internal secrets')

  // reconnecting with another account's token replaces it
  const other = github.addAccount('octo-other')
  const again = await connect(app, owner.cookie, other.token)
  t.equal(again.statusCode, 200)
  t.equal(again.json().integration.account, 'octo-other')
  t.equal(await app.secrets.internal.open(owner.org.id, 'github:token'), other.token)
  t.equal((await secretRows(app, owner.org.id)).length, 1)
})

t.test('connect: a token GitHub refuses is 400 naming /body/token, and nothing is kept', async (t) => {
  const github = await startFakeGitHub(t)
  const app = await buildGitHubApp(t, { env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText() } })
  const owner = await signUpWithOrg(app)

  const res = await connect(app, owner.cookie, 'ghp_notatokengithubknows')
  t.equal(res.statusCode, 400)
  t.equal(res.json().error, 'validation_failed')
  t.equal(res.json().details[0].path, '/body/token')
  t.notMatch(res.body, 'ghp_notatokengithubknows')
  t.same(await integrationRows(app, owner.org.id), [])
  t.same(await secretRows(app, owner.org.id), [])

  // a connected org that sends a bad token keeps its connection
  const account = github.addAccount('keeper')
  t.equal((await connect(app, owner.cookie, account.token)).statusCode, 200)
  t.equal((await connect(app, owner.cookie, 'ghp_bad')).statusCode, 400)
  t.equal((await integrationRows(app, owner.org.id))[0]!.account, 'keeper')
  t.equal(await app.secrets.internal.open(owner.org.id, 'github:token'), account.token)

  // schema refusals change nothing and never reach GitHub
  const asked = github.log.length
  for (const token of ['', 'has space', 'x'.repeat(1025), 'nul\u0000', 42, null]) {
    const bad = await connect(app, owner.cookie, token)
    t.equal(bad.statusCode, 400, JSON.stringify(token))
    t.equal(bad.json().error, 'validation_failed')
  }
  const extra = await app.inject({
    method: 'PUT',
    url: '/api/integrations/github',
    headers: { cookie: owner.cookie },
    payload: { token: account.token, account: 'x' }
  })
  t.equal(extra.statusCode, 400, 'unknown fields are refused')
  t.equal(github.log.length, asked, 'GitHub was not asked')
  t.equal(await app.secrets.internal.open(owner.org.id, 'github:token'), account.token)

  // GitHub down: 502, nothing kept
  const fresh = await signUpWithOrg(app)
  github.failNext(/^\/user$/, 500, { message: 'boom' })
  const down = await connect(app, fresh.cookie, account.token)
  t.equal(down.statusCode, 502)
  t.equal(down.json().error, 'upstream_failed')
  t.same(await integrationRows(app, fresh.org.id), [])
  // GitHub's rate limit while checking: 503 with Retry-After, nothing kept
  github.failNext(/^\/user$/, 429, { message: 'Too many requests' }, { 'retry-after': '17' })
  const limited = await connect(app, fresh.cookie, account.token)
  t.equal(limited.statusCode, 503)
  t.equal(limited.json().error, 'upstream_rate_limited')
  t.equal(limited.headers['retry-after'], '17')
  t.same(await integrationRows(app, fresh.org.id), [])
})

t.test('connect and disconnect are admin routes; keys get 401; members 403', async (t) => {
  const github = await startFakeGitHub(t)
  const app = await buildGitHubApp(t, { env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText() } })
  const owner = await signUpWithOrg(app)
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const { authorization } = await mintKey(app, owner.cookie)
  const account = github.addAccount('admin-only')

  const asMember = await connect(app, member.cookie, account.token)
  t.equal(asMember.statusCode, 403)
  t.equal(asMember.json().error, 'organization_admin_required')
  const asKey = await app.inject({
    method: 'PUT',
    url: '/api/integrations/github',
    headers: { authorization },
    payload: { token: account.token }
  })
  t.equal(asKey.statusCode, 401)
  t.equal(github.log.length, 0, 'GitHub was not asked')

  t.equal((await connect(app, owner.cookie, account.token)).statusCode, 200)
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/github', headers: { cookie: member.cookie } }))
      .statusCode,
    403
  )
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/github', headers: { authorization } })).statusCode,
    401
  )
  t.equal((await integrationRows(app, owner.org.id)).length, 1, 'still connected')

  // members read (org routes)
  const reads = await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: member.cookie } })
  t.equal(reads.statusCode, 200)
})

t.test(
  'disconnect: 204, the token and cached lists are gone; again 404; then routes answer 503 integration_not_connected',
  async (t) => {
    const github = await startFakeGitHub(t)
    const app = await buildGitHubApp(t, { env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText() } })
    const owner = await signUpWithOrg(app)
    const account = github.addAccount('leaving')
    github.addRepo('leaving', 'tools')
    t.equal((await connect(app, owner.cookie, account.token)).statusCode, 200)
    t.equal(
      (await app.inject({ method: 'GET', url: '/api/github/repos', headers: { cookie: owner.cookie } })).statusCode,
      200
    )
    const cached = rowsOf<{ n: number }>(
      await app.db.execute(sql`select count(*)::int as n from github_cache where org_id = ${owner.org.id}`)
    )[0]!.n
    t.equal(cached, 1, 'the list was cached')

    const res = await app.inject({
      method: 'DELETE',
      url: '/api/integrations/github',
      headers: { cookie: owner.cookie }
    })
    t.equal(res.statusCode, 204)
    t.same(await integrationRows(app, owner.org.id), [])
    t.same(await secretRows(app, owner.org.id), [])
    t.equal(
      rowsOf<{ n: number }>(
        await app.db.execute(sql`select count(*)::int as n from github_cache where org_id = ${owner.org.id}`)
      )[0]!.n,
      0
    )

    const twice = await app.inject({
      method: 'DELETE',
      url: '/api/integrations/github',
      headers: { cookie: owner.cookie }
    })
    t.equal(twice.statusCode, 404)
    t.equal(twice.json().error, 'not_found')

    const asked = github.log.length
    for (const [method, url, payload] of [
      ['GET', '/api/github/repos', undefined],
      ['GET', '/api/github/repos/leaving/tools/pulls', undefined],
      ['POST', '/api/skills/import', { repo: 'leaving/tools', path: 'skills/a' }],
      ['POST', '/api/knowledge/wiki', { repo: 'leaving/tools' }]
    ] as const) {
      const r = await app.inject({ method, url, headers: { cookie: owner.cookie }, ...(payload ? { payload } : {}) })
      t.equal(r.statusCode, 503, `${method} ${url}`)
      t.equal(r.json().error, 'integration_not_connected')
      t.match(r.json().message, /PUT \/api\/integrations\/github/)
    }
    t.equal(github.log.length, asked, 'GitHub was not asked')
    t.equal(
      rowsOf<{ n: number }>(
        await app.db.execute(sql`select count(*)::int as n from runs where org_id = ${owner.org.id}`)
      )[0]!.n,
      0,
      'no wiki run was made'
    )
  }
)

t.test(
  'without a key ring (Postgres without SECRETS_KEY) connecting is 503 secrets_unavailable before GitHub is asked',
  {
    skip: process.env.DATABASE_URL ? false : 'the embedded database always has a key (made in DATA_DIR)'
  },
  async (t) => {
    const github = await startFakeGitHub(t)
    const app = await buildGitHubApp(t, { env: { GITHUB_API_URL: github.url } })
    const owner = await signUpWithOrg(app)
    const account = github.addAccount('nokey')
    const res = await connect(app, owner.cookie, account.token)
    t.equal(res.statusCode, 503)
    t.equal(res.json().error, 'secrets_unavailable')
    t.equal(github.log.length, 0)
  }
)
