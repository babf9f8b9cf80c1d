import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { addMember, mintKey, signUp, signUpWithOrg } from '../helper.js'
import { startFakeSlack } from './fake-slack.js'
import { buildSlackApp } from './group.js'
import { connectSlack, installApp } from './helpers.js'

// Postgres has no key file: the deployment's key (one for the whole file)
const KEY = newKeyText()

t.test('connect, read, reconnect and disconnect Slack', async (t) => {
  const fake = await startFakeSlack(t)
  const app = await buildSlackApp(t, { env: { SLACK_API_URL: fake.url, SECRETS_KEY: KEY } })
  const owner = await signUpWithOrg(app)
  const slack = installApp(fake, 'acme')

  const res = await connectSlack(app, owner.cookie, slack)
  t.equal(res.statusCode, 200, res.body)
  const { integration } = res.json()
  t.match(integration, { kind: 'slack', connected: true, account: slack.team, lastError: null })
  t.ok(Date.parse(integration.connectedAt))
  t.notMatch(res.body, slack.botToken, 'the token is never returned')
  t.notMatch(res.body, slack.signingSecret, 'nor the signing secret')
  t.equal(fake.calls['auth.test'], 1, 'the token was checked with auth.test')

  const list = (await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })).json()
  t.match(
    list.items.find((i: { kind: string }) => i.kind === 'slack'),
    { connected: true, account: slack.team }
  )

  // the rows: settings with the team and the bot's ids; credentials sealed as internal secrets
  const [row] = rowsOf<{ account: string; settings: unknown; connected_by: string }>(
    await app.db.execute(sql`select * from integrations where org_id = ${owner.org.id} and kind = 'slack'`)
  )
  t.match(row, { account: slack.team, connected_by: owner.user.id })
  t.match(typeof row!.settings === 'string' ? JSON.parse(row!.settings) : row!.settings, {
    teamId: slack.teamId,
    botUserId: slack.botUserId,
    botId: slack.botId
  })
  const secrets = rowsOf<{ name: string; sealed: string }>(
    await app.db.execute(sql`select name, sealed from secrets where org_id = ${owner.org.id} order by name`)
  )
  t.same(
    secrets.map((s) => s.name),
    ['cairn:slack:bot-token', 'cairn:slack:signing-secret']
  )
  for (const s of secrets) {
    t.notMatch(s.sealed, slack.botToken)
    t.notMatch(Buffer.from(s.sealed, 'base64').toString('latin1'), slack.signingSecret, 'sealed, not stored as is')
  }
  t.equal(await app.secrets.internal.open(owner.org.id, 'slack:bot-token'), slack.botToken)
  const listed = (await app.inject({ method: 'GET', url: '/api/secrets', headers: { cookie: owner.cookie } })).json()
  t.same(listed.items, [], "never listed among the org's secrets")
  const [team] = rowsOf<{ org_id: string; bot_user_id: string }>(
    await app.db.execute(sql`select * from slack_teams where team_id = ${slack.teamId}`)
  )
  t.match(team, { org_id: owner.org.id, bot_user_id: slack.botUserId })

  // connecting again (a new signing secret) replaces the credentials
  const again = await connectSlack(app, owner.cookie, slack, { signingSecret: 'a-new-signing-secret' })
  t.equal(again.statusCode, 200)
  t.equal(await app.secrets.internal.open(owner.org.id, 'slack:signing-secret'), 'a-new-signing-secret')

  // another workspace: the org moves to it, and the old team is let go
  const other = installApp(fake, 'other')
  t.equal((await connectSlack(app, owner.cookie, other)).statusCode, 200)
  const teams = rowsOf<{ team_id: string }>(
    await app.db.execute(sql`select team_id from slack_teams where org_id = ${owner.org.id}`)
  )
  t.same(
    teams.map((r) => r.team_id),
    [other.teamId]
  )

  const del = await app.inject({ method: 'DELETE', url: '/api/integrations/slack', headers: { cookie: owner.cookie } })
  t.equal(del.statusCode, 204)
  t.equal(del.body, '')
  const after = (
    await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })
  ).json()
  t.match(
    after.items.find((i: { kind: string }) => i.kind === 'slack'),
    { connected: false, account: null, connectedAt: null }
  )
  t.same(
    rowsOf(await app.db.execute(sql`select name from secrets where org_id = ${owner.org.id}`)),
    [],
    'credentials deleted'
  )
  t.same(rowsOf(await app.db.execute(sql`select team_id from slack_teams where org_id = ${owner.org.id}`)), [])
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/slack', headers: { cookie: owner.cookie } }))
      .statusCode,
    204,
    'twice: still 204'
  )
})

t.test('connect validation: the token is checked before anything is kept', async (t) => {
  const fake = await startFakeSlack(t)
  const app = await buildSlackApp(t, { env: { SLACK_API_URL: fake.url, SECRETS_KEY: KEY } })
  const owner = await signUpWithOrg(app)
  const slack = installApp(fake)
  const kept = async () =>
    rowsOf(
      await app.db.execute(sql`
    select 1 from integrations where org_id = ${owner.org.id} union all select 1 from secrets where org_id = ${owner.org.id}
    union all select 1 from slack_teams where org_id = ${owner.org.id}`)
    ).length

  const refused = await connectSlack(app, owner.cookie, slack, { botToken: 'xoxb-revoked-or-made-up' })
  t.equal(refused.statusCode, 400)
  t.match(refused.json(), {
    error: 'validation_failed',
    details: [{ path: '/body/botToken', message: /invalid_auth/ }]
  })

  const wrongTeam = await connectSlack(app, owner.cookie, slack, { teamId: 'TSOMEONEELSE' })
  t.equal(wrongTeam.statusCode, 400)
  t.match(wrongTeam.json(), {
    error: 'validation_failed',
    details: [{ path: '/body/teamId', message: new RegExp(slack.teamId) }]
  })

  for (const [body, path] of [
    [{ botToken: slack.botToken, signingSecret: slack.signingSecret }, /teamId/],
    [{ botToken: slack.botToken, teamId: slack.teamId }, /signingSecret/],
    [{ signingSecret: slack.signingSecret, teamId: slack.teamId }, /botToken/],
    [{ botToken: '', signingSecret: slack.signingSecret, teamId: slack.teamId }, /botToken/],
    [{ botToken: slack.botToken, signingSecret: slack.signingSecret, teamId: 'T 1' }, /teamId/],
    [{ botToken: 'xoxb-\u00e9t\u00e9', signingSecret: slack.signingSecret, teamId: slack.teamId }, /botToken/],
    [
      { botToken: slack.botToken, signingSecret: slack.signingSecret, teamId: slack.teamId, orgId: 'x' },
      /orgId|org_id/
    ],
    [{ botToken: slack.botToken, signingSecret: slack.signingSecret, teamId: slack.teamId, extra: 1 }, /.*/]
  ] as const) {
    const res = await app.inject({
      method: 'PUT',
      url: '/api/integrations/slack',
      headers: { cookie: owner.cookie },
      payload: body
    })
    t.equal(res.statusCode, 400, JSON.stringify(body))
    t.match(res.body, path)
  }
  t.equal(fake.calls['auth.test'], 2, 'invalid bodies never reach Slack')

  // Slack down, Slack rate-limiting: 502 and 503 with Retry-After
  fake.authPlan.push({ http500: true })
  const down = await connectSlack(app, owner.cookie, slack)
  t.equal(down.statusCode, 502)
  t.match(down.json(), { error: 'upstream_failed', message: /Slack/ })
  fake.authPlan.push({ rateLimit: 7 })
  const limited = await connectSlack(app, owner.cookie, slack)
  t.equal(limited.statusCode, 503)
  t.equal(limited.headers['retry-after'], '7')
  t.match(limited.json(), { error: 'upstream_rate_limited' })

  t.equal(await kept(), 0, 'nothing was kept by any refused attempt')
})

t.test('admins only; a team belongs to one org at a time', async (t) => {
  const fake = await startFakeSlack(t)
  const app = await buildSlackApp(t, { env: { SLACK_API_URL: fake.url, ALLOW_DEV_ORG: 'false', SECRETS_KEY: KEY } })
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  const member = await signUp(app)
  await addMember(app, a.cookie, a.org.id, member.user.email, 'member')
  const slack = installApp(fake)

  const asMember = await connectSlack(app, member.cookie, slack)
  t.equal(asMember.statusCode, 403)
  t.equal(asMember.json().error, 'organization_admin_required')
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/slack', headers: { cookie: member.cookie } })).json()
      .error,
    'organization_admin_required'
  )
  const key = await mintKey(app, a.cookie)
  t.equal(
    (
      await app.inject({
        method: 'PUT',
        url: '/api/integrations/slack',
        headers: { authorization: key.authorization },
        payload: {}
      })
    ).statusCode,
    401,
    'never for a key'
  )
  t.equal(
    (await app.inject({ method: 'PUT', url: '/api/integrations/slack', payload: {} })).statusCode,
    401,
    'never anonymous'
  )

  t.equal((await connectSlack(app, a.cookie, slack)).statusCode, 200)
  const taken = await connectSlack(app, b.cookie, slack)
  t.equal(taken.statusCode, 409)
  t.match(taken.json(), { error: 'conflict', message: /another organization/ })
  t.same(
    rowsOf(await app.db.execute(sql`select name from secrets where org_id = ${b.org.id}`)),
    [],
    'the refused org kept nothing'
  )
  const bList = (await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: b.cookie } })).json()
  t.match(
    bList.items.find((i: { kind: string }) => i.kind === 'slack'),
    { connected: false }
  )

  // B disconnecting touches nothing of A's
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/slack', headers: { cookie: b.cookie } })).statusCode,
    204
  )
  const aList = (await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: a.cookie } })).json()
  t.match(
    aList.items.find((i: { kind: string }) => i.kind === 'slack'),
    { connected: true }
  )

  // once A lets it go, B may take it
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/slack', headers: { cookie: a.cookie } })).statusCode,
    204
  )
  t.equal((await connectSlack(app, b.cookie, slack)).statusCode, 200)
})

t.test(
  'without a key to seal credentials with (Postgres without SECRETS_KEY): 503 before Slack is asked',
  { skip: process.env.DATABASE_URL ? false : 'the embedded database always has a key' },
  async (t) => {
    const fake = await startFakeSlack(t)
    const app = await buildSlackApp(t, { env: { SLACK_API_URL: fake.url } })
    const owner = await signUpWithOrg(app)
    const res = await connectSlack(app, owner.cookie, installApp(fake))
    t.equal(res.statusCode, 503)
    t.equal(res.json().error, 'secrets_unavailable')
    t.equal(fake.calls['auth.test'], undefined)
  }
)
