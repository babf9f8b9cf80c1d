import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { slackSignature } from '../../src/slack/signature.js'
import { signUpWithOrg } from '../helper.js'
import { startFakeSlack } from './fake-slack.js'
import { buildSlackApp } from './group.js'
import {
  callback,
  connectSlack,
  INGRESS_ENV,
  ingressFixture,
  EVENTS_URL,
  installApp,
  mentionPair,
  nowSeconds,
  postEvent,
  signedHeaders
} from './helpers.js'

const { setUp } = await ingressFixture(t)

const count = async (
  app: FastifyInstance,
  table: 'runs' | 'slack_replies' | 'slack_messages' | 'slack_events',
  orgId: string
) =>
  Number(
    rowsOf<{ n: number }>(
      await app.db.execute(sql`select count(*)::int as n from ${sql.identifier(table)} where org_id = ${orgId}`)
    )[0]!.n
  )

t.test('requests that are not signed by the connected app are 401 and change nothing', async (t) => {
  const { app, owner, slack, fake } = await setUp()
  const body = JSON.stringify(callback(slack, mentionPair(slack).mention))
  const good = signedHeaders(slack.signingSecret, body)
  const refused = async (name: string, payload: string, headers: Record<string, string>) => {
    const res = await postEvent(app, payload, headers)
    t.equal(res.statusCode, 401, name)
    t.equal(res.json().error, 'unauthorized', name)
    t.ok(res.headers['x-service-release-fingerprint'], `${name}: the release headers`)
  }
  await refused('a tampered body', body.replace('what is the weather', 'what is the time!!'), good)
  await refused('a body with a byte more', `${body} `, good)
  await refused('the wrong secret', body, signedHeaders('not-the-signing-secret', body))
  await refused("another connected org's secret", body, signedHeaders(installApp(fake).signingSecret, body))
  const stale = String(nowSeconds() - 301)
  await refused('a stale timestamp (301 s old)', body, signedHeaders(slack.signingSecret, body, stale))
  // well past the window: the service reads its clock a moment later, maybe in the next second
  const future = String(nowSeconds() + 330)
  await refused('a timestamp from the future (330 s ahead)', body, signedHeaders(slack.signingSecret, body, future))
  await refused('a signature one character short', body, {
    ...good,
    'x-slack-signature': good['x-slack-signature']!.slice(0, -1)
  })
  await refused('a signature one character long', body, {
    ...good,
    'x-slack-signature': `${good['x-slack-signature']}0`
  })
  await refused('a signature without its version', body, {
    ...good,
    'x-slack-signature': good['x-slack-signature']!.slice(3)
  })
  const { 'x-slack-signature': _s, ...noSignature } = good
  await refused('no X-Slack-Signature', body, noSignature)
  const { 'x-slack-request-timestamp': _ts, ...noTimestamp } = good
  await refused('no X-Slack-Request-Timestamp', body, noTimestamp)
  await refused('no Slack headers at all', body, { 'content-type': 'application/json' })
  await refused('a signature over another timestamp', body, {
    ...good,
    'x-slack-request-timestamp': String(Number(good['x-slack-request-timestamp']) - 1)
  })
  await refused('a non-numeric timestamp', body, { ...good, 'x-slack-request-timestamp': 'yesterday' })
  const unknownTeam = body.replaceAll(slack.teamId, 'TNOBODY')
  await refused('a team nobody connected', unknownTeam, signedHeaders(slack.signingSecret, unknownTeam))
  await refused('a signed body that is not JSON', 'not json', signedHeaders(slack.signingSecret, 'not json'))
  await refused('an empty body', '', signedHeaders(slack.signingSecret, ''))
  const noTeam = JSON.stringify({ type: 'event_callback', event_id: 'Ev1', event: mentionPair(slack).mention })
  await refused('an event callback naming no team', noTeam, signedHeaders(slack.signingSecret, noTeam))
  t.equal(await count(app, 'runs', owner.org.id), 0)
  t.equal(await count(app, 'slack_events', owner.org.id), 0)

  // the same request, signed properly, is taken
  const ok = await postEvent(app, body, good)
  t.equal(ok.statusCode, 200, ok.body)
  t.same(ok.json(), { ok: true })
  t.equal(await count(app, 'runs', owner.org.id), 1)
})

t.test("the time window follows the service's clock", async (t) => {
  const fake = await startFakeSlack(t)
  const at = 1531420618
  const app = await buildSlackApp(t, {
    env: { ...INGRESS_ENV, SLACK_API_URL: fake.url },
    clock: { now: () => new Date(at * 1000) }
  })
  const owner = await signUpWithOrg(app)
  const slack = installApp(fake)
  t.equal(
    (await connectSlack(app, owner.cookie, slack, { signingSecret: '8f742231b10e8888abcd99yyyzzz85a5' })).statusCode,
    200
  )
  const body = JSON.stringify(callback(slack, mentionPair(slack).mention))
  const sign = (ts: number) => signedHeaders('8f742231b10e8888abcd99yyyzzz85a5', body, String(ts))
  t.equal((await postEvent(app, body, sign(at - 300))).statusCode, 200, '300 s before the clock')
  t.equal((await postEvent(app, body, sign(at + 300))).statusCode, 200, '300 s after the clock')
  t.equal((await postEvent(app, body, sign(at - 301))).statusCode, 401)
  t.equal((await postEvent(app, body, sign(at + 301))).statusCode, 401)
  t.equal((await postEvent(app, body, sign(nowSeconds()))).statusCode, 401, 'the real time is 8 years later')
})

t.test('url_verification answers its challenge when signed by a connected app', async (t) => {
  const { app, fake } = await setUp()
  // a second org's app: the challenge must verify under one of the connected secrets
  const second = await signUpWithOrg(app)
  const other = installApp(fake)
  t.equal((await connectSlack(app, second.cookie, other)).statusCode, 200)
  const body = JSON.stringify({
    token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl',
    challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P',
    type: 'url_verification'
  })
  const res = await postEvent(app, body, signedHeaders(other.signingSecret, body))
  t.equal(res.statusCode, 200)
  t.same(res.json(), { challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P' })
  t.equal((await postEvent(app, body, signedHeaders('a secret no org has', body))).statusCode, 401, 'an unknown secret')
  t.equal((await postEvent(app, body, { 'content-type': 'application/json' })).statusCode, 401, 'unsigned')
  t.equal(
    (await postEvent(app, body, signedHeaders(other.signingSecret, body, String(nowSeconds() - 400)))).statusCode,
    401,
    'stale'
  )
})

t.test('hostile and odd input on the public route never reaches a 5xx', async (t) => {
  const { app, slack } = await setUp()
  // signed (so it passes the signature) but refused by the schema or the hostile-input rules
  const cases = [
    JSON.stringify({
      type: 'event_callback',
      team_id: slack.teamId,
      event: { type: 'app_mention', text: 'a\u0000b', channel: 'C1', ts: '1.1' }
    }),
    JSON.stringify({ type: 'event_callback', team_id: slack.teamId, event: 'not an object' }),
    JSON.stringify({ type: 42, team_id: slack.teamId }),
    `{"type":"event_callback","team_id":"${slack.teamId}","event":${'{"a":['.repeat(40)}1${']}'.repeat(40)}}`,
    '[1,2,3]',
    `{"team_id":"${slack.teamId}","__proto__":{"admin":true},"type":"event_callback"}`
  ]
  for (const body of cases) {
    const res = await postEvent(app, body, signedHeaders(slack.signingSecret, body))
    t.ok(res.statusCode >= 400 && res.statusCode < 500, `${body.slice(0, 60)} -> ${res.statusCode}`)
    t.ok(res.json().error)
  }
  // another content type is not taken
  const form = 'token=x&team_id=T1'
  const res = await app.inject({
    method: 'POST',
    url: EVENTS_URL,
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      'x-slack-request-timestamp': String(nowSeconds()),
      'x-slack-signature': slackSignature(slack.signingSecret, String(nowSeconds()), form)
    },
    payload: form
  })
  t.equal(res.statusCode, 415)
})
