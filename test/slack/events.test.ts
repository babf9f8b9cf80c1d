import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { secondHandle, signUpWithOrg } from '../helper.js'
import { startFakeSlack } from './fake-slack.js'
import { buildSlackApp } from './group.js'
import {
  callback,
  connectSlack,
  INGRESS_ENV,
  ingressFixture,
  eventId,
  installApp,
  mentionPair,
  messageTs,
  postEvent,
  sendEvent,
  signedHeaders
} from './helpers.js'

const { setUp } = await ingressFixture(t)

const runsOf = async (app: FastifyInstance, orgId: string) =>
  rowsOf<{
    id: string
    root_run_id: string
    parent_run_id: string | null
    origin: string
    prompt: string
    status: string
    user_id: string | null
    metadata: unknown
  }>(await app.db.execute(sql`select * from runs where org_id = ${orgId} order by id`))
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

t.test('an app_mention starts one chatplatform run; retries of its event_id start nothing more', async (t) => {
  const { app, owner, slack } = await setUp()
  const { mention } = mentionPair(slack, { text: 'summarize &lt;the&gt; plan &amp; risks', channel: 'C0PLAN' })
  const id = eventId()
  const first = await sendEvent(app, slack, mention, { eventId: id })
  t.equal(first.statusCode, 200)
  t.same(first.json(), { ok: true })
  for (const retry of [1, 2, 3]) {
    const again = await sendEvent(app, slack, mention, { eventId: id, retry })
    t.equal(again.statusCode, 200, `retry ${retry} is acknowledged`)
  }
  const runs = await runsOf(app, owner.org.id)
  t.equal(runs.length, 1, 'one run')
  const run = runs[0]!
  t.match(run, {
    origin: 'chatplatform',
    prompt: 'summarize <the> plan & risks',
    status: 'queued',
    user_id: null,
    parent_run_id: null
  })
  t.equal(run.root_run_id, run.id, 'it starts a thread')
  t.match(typeof run.metadata === 'string' ? JSON.parse(run.metadata) : run.metadata, {
    slack: {
      teamId: slack.teamId,
      channel: 'C0PLAN',
      ts: mention.ts,
      threadTs: mention.ts,
      user: 'UHUMAN1',
      eventId: id
    }
  })
  const reply = rowsOf(await app.db.execute(sql`select * from slack_replies where run_id = ${run.id}`))
  t.match(
    reply,
    [{ state: 'waiting', channel: 'C0PLAN', thread_ts: mention.ts, message_ts: mention.ts, attempts: 0 }],
    'its reply waits in the outbox'
  )
  // the API shows it like any run
  const viaApi = (
    await app.inject({ method: 'GET', url: `/api/runs/${run.id}`, headers: { cookie: owner.cookie } })
  ).json()
  t.match(viaApi.run, { origin: 'chatplatform', rootRunId: run.id })
})

t.test('the message and app_mention events of one message start one run, in either order and at once', async (t) => {
  const { app, owner, slack } = await setUp()
  const first = mentionPair(slack)
  t.equal((await sendEvent(app, slack, first.mention)).statusCode, 200)
  t.equal((await sendEvent(app, slack, first.message)).statusCode, 200)
  t.equal(await count(app, 'runs', owner.org.id), 1, 'app_mention, then message: one run')

  const second = mentionPair(slack)
  t.equal((await sendEvent(app, slack, second.message)).statusCode, 200)
  t.equal((await sendEvent(app, slack, second.mention)).statusCode, 200)
  t.equal(await count(app, 'runs', owner.org.id), 2, 'message, then app_mention: one run more')

  const third = mentionPair(slack)
  const both = await Promise.all([
    sendEvent(app, slack, third.message),
    sendEvent(app, slack, third.mention),
    sendEvent(app, slack, third.message, { retry: 1 })
  ])
  t.same(
    both.map((r) => r.statusCode),
    [200, 200, 200]
  )
  t.equal(await count(app, 'runs', owner.org.id), 3, 'both at once (and a retry): one run more')
  t.equal(await count(app, 'slack_replies', owner.org.id), 3, 'one reply row per run')
})

t.test("what starts no run: the bot's own messages, other bots, edits, messages not addressed to it", async (t) => {
  const { app, owner, slack } = await setUp()
  const ts = messageTs
  const events: Array<[string, Record<string, unknown>]> = [
    [
      "the bot's own reply (bot_id)",
      {
        type: 'message',
        channel: 'C1',
        ts: ts(),
        text: `<@${slack.botUserId}> loop`,
        bot_id: slack.botId,
        user: slack.botUserId
      }
    ],
    [
      "the bot's own user mentioning itself",
      { type: 'app_mention', channel: 'C1', ts: ts(), text: `<@${slack.botUserId}> hi`, user: slack.botUserId }
    ],
    [
      'a bot_message subtype',
      {
        type: 'message',
        subtype: 'bot_message',
        channel: 'C1',
        ts: ts(),
        text: `<@${slack.botUserId}> hi`,
        bot_id: 'BOTHER'
      }
    ],
    [
      "another bot's mention",
      {
        type: 'app_mention',
        channel: 'C1',
        ts: ts(),
        text: `<@${slack.botUserId}> hi`,
        user: 'UOTHERBOT',
        bot_id: 'BOTHER'
      }
    ],
    [
      'an edit',
      {
        type: 'message',
        subtype: 'message_changed',
        channel: 'C1',
        ts: ts(),
        message: { text: `<@${slack.botUserId}> hi` }
      }
    ],
    [
      'a channel message without a mention',
      { type: 'message', channel_type: 'channel', channel: 'C1', ts: ts(), text: 'hello all', user: 'UHUMAN1' }
    ],
    [
      'a mention of someone else',
      { type: 'message', channel_type: 'channel', channel: 'C1', ts: ts(), text: '<@USOMEONE> hi', user: 'UHUMAN1' }
    ],
    [
      'a reaction',
      {
        type: 'reaction_added',
        user: 'UHUMAN1',
        reaction: 'thumbsup',
        item: { type: 'message', channel: 'C1', ts: ts() }
      }
    ],
    ['a mention without channel', { type: 'app_mention', ts: ts(), text: `<@${slack.botUserId}> hi`, user: 'UHUMAN1' }]
  ]
  for (const [name, event] of events) {
    const res = await sendEvent(app, slack, event)
    t.equal(res.statusCode, 200, `${name}: acknowledged`)
  }
  t.equal(await count(app, 'runs', owner.org.id), 0, 'no run')

  // a direct message is addressed to the bot without a mention
  const dm = await sendEvent(app, slack, {
    type: 'message',
    channel_type: 'im',
    channel: 'D0DIRECT',
    ts: ts(),
    text: 'hello bot',
    user: 'UHUMAN1'
  })
  t.equal(dm.statusCode, 200)
  const runs = await runsOf(app, owner.org.id)
  t.equal(runs.length, 1)
  t.equal(runs[0]!.prompt, 'hello bot')
})

t.test('one Slack thread is one Cairn thread', async (t) => {
  const { app, owner, slack } = await setUp()
  const root = mentionPair(slack, { text: 'first question' })
  await sendEvent(app, slack, root.mention)
  const inThread = mentionPair(slack, { threadTs: root.mention.ts, text: 'follow-up' })
  await sendEvent(app, slack, inThread.message)
  await sendEvent(app, slack, inThread.mention)
  const third = mentionPair(slack, { threadTs: root.mention.ts, text: 'and another' })
  await sendEvent(app, slack, third.mention)
  const elsewhere = mentionPair(slack, { text: 'unrelated', channel: 'C0OTHER' })
  await sendEvent(app, slack, elsewhere.mention)
  // a mention in a thread the bot was not in yet starts a thread of its own
  const lateThread = mentionPair(slack, { threadTs: '1700000000.000001', text: 'late joiner' })
  await sendEvent(app, slack, lateThread.mention)

  const runs = await runsOf(app, owner.org.id)
  t.equal(runs.length, 5)
  const [r1, r2, r3, r4, r5] = runs
  t.equal(r1!.root_run_id, r1!.id)
  t.equal(r2!.root_run_id, r1!.id, 'a mention in the thread continues it')
  t.equal(r2!.parent_run_id, r1!.id)
  t.equal(r3!.root_run_id, r1!.id)
  t.equal(r3!.parent_run_id, r2!.id, "hung off the thread's latest run")
  t.equal(r4!.root_run_id, r4!.id, 'another channel, another thread')
  t.equal(r5!.root_run_id, r5!.id)
  const thread = (
    await app.inject({ method: 'GET', url: `/api/threads/${r1!.id}`, headers: { cookie: owner.cookie } })
  ).json()
  t.equal(thread.runs.length, 3)
  const replies = rowsOf<{ run_id: string; thread_ts: string }>(
    await app.db.execute(
      sql`select run_id, thread_ts from slack_replies where org_id = ${owner.org.id} order by run_id`
    )
  )
  t.same(
    replies.slice(0, 3).map((r) => r.thread_ts),
    [root.mention.ts, root.mention.ts, root.mention.ts],
    'every answer goes to the Slack thread'
  )
  t.equal(replies[4]!.thread_ts, '1700000000.000001')
})

t.test('app_uninstalled and tokens_revoked disconnect the org', async (t) => {
  for (const type of ['app_uninstalled', 'tokens_revoked']) {
    await t.test(type, async (t) => {
      const { app, owner, slack } = await setUp()
      const event = type === 'app_uninstalled' ? { type } : { type, tokens: { bot: [slack.botUserId] } }
      const res = await sendEvent(app, slack, event)
      t.equal(res.statusCode, 200)
      const list = (
        await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })
      ).json()
      t.match(
        list.items.find((i: { kind: string }) => i.kind === 'slack'),
        { connected: false }
      )
      t.same(
        rowsOf(await app.db.execute(sql`select name from secrets where org_id = ${owner.org.id}`)),
        [],
        'its credentials are gone'
      )
      t.same(rowsOf(await app.db.execute(sql`select team_id from slack_teams where team_id = ${slack.teamId}`)), [])
      const later = await sendEvent(app, slack, mentionPair(slack).mention)
      t.equal(later.statusCode, 401, 'its events are refused afterwards')
      t.equal(await count(app, 'runs', owner.org.id), 0)
    })
  }
})

t.test("tenancy: each team's events land in its own org only", async (t) => {
  const { app, owner: a, slack: slackA, fake } = await setUp()
  const b = await signUpWithOrg(app)
  const slackB = installApp(fake)
  t.equal((await connectSlack(app, b.cookie, slackB)).statusCode, 200)

  await sendEvent(app, slackA, mentionPair(slackA, { text: 'for A' }).mention)
  await sendEvent(app, slackB, mentionPair(slackB, { text: 'for B' }).mention)
  // B's team id signed with A's secret (A's admin knows only A's secret): refused
  const forged = JSON.stringify(callback(slackB, mentionPair(slackB, { text: 'forged' }).mention))
  t.equal((await postEvent(app, forged, signedHeaders(slackA.signingSecret, forged))).statusCode, 401)
  // the same channel and ts in two workspaces are two messages
  const shared = { channel: 'C0SAME', ts: '1700000001.000001' }
  await sendEvent(app, slackA, mentionPair(slackA, { ...shared, text: 'same place A' }).mention)
  await sendEvent(app, slackB, mentionPair(slackB, { ...shared, text: 'same place B' }).mention)

  const runsA = await runsOf(app, a.org.id)
  const runsB = await runsOf(app, b.org.id)
  t.same(
    runsA.map((r) => r.prompt),
    ['for A', 'same place A']
  )
  t.same(
    runsB.map((r) => r.prompt),
    ['for B', 'same place B']
  )
  const listA = (await app.inject({ method: 'GET', url: '/api/runs', headers: { cookie: a.cookie } })).json()
  t.same(listA.items.map((r: { prompt: string }) => r.prompt).sort(), ['for A', 'same place A'])
  const peek = await app.inject({ method: 'GET', url: `/api/runs/${runsB[0]!.id}`, headers: { cookie: a.cookie } })
  t.equal(peek.statusCode, 404, "B's run is not A's")
})

t.test('two instances: the two events of one message, one on each, start one run', async (t) => {
  const fake = await startFakeSlack(t)
  // INGRESS_ENV's SECRETS_KEY: one key ring for both, as the instances of one deployment share it
  const env = { ...INGRESS_ENV, SLACK_API_URL: fake.url }
  const first = await buildSlackApp(t, { env })
  const second = await buildSlackApp(t, { env, db: await secondHandle(t, first.testDb) })
  const owner = await signUpWithOrg(first)
  const slack = installApp(fake)
  t.equal((await connectSlack(first, owner.cookie, slack)).statusCode, 200)
  for (let i = 0; i < 5; i++) {
    const pair = mentionPair(slack)
    const id = eventId()
    const answers = await Promise.all([
      sendEvent(first, slack, pair.message),
      sendEvent(second, slack, pair.mention, { eventId: id }),
      sendEvent(first, slack, pair.mention, { eventId: id, retry: 1 })
    ])
    t.same(
      answers.map((r) => r.statusCode),
      [200, 200, 200]
    )
  }
  t.equal(await count(first, 'runs', owner.org.id), 5, 'five messages, five runs')
  t.equal(await count(first, 'slack_replies', owner.org.id), 5)
})
