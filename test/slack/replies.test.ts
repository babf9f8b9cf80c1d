import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, secondHandle, signUpWithOrg, waitFor } from '../helper.js'
import { startOpenAiUpstream } from '../runs/openai-upstream.js'
import { startFakeSlack, type FakeSlack } from './fake-slack.js'
import { connectSlack, installApp, mentionPair, sendEvent, type SlackApp } from './helpers.js'

/**
 * A model that answers at once, except for prompts naming a gate (`GATE:name`): those wait
 * until the test opens that gate (an engine that takes as long as the test wants, no timer).
 */
function gatedModel() {
  const gates = new Map<string, { opened: Promise<void>; open(): void; started: Promise<void>; start(): void }>()
  const gate = (name: string) => {
    let g = gates.get(name)
    if (!g) {
      let open!: () => void
      let start!: () => void
      const opened = new Promise<void>((resolve) => (open = resolve))
      const started = new Promise<void>((resolve) => (start = resolve))
      gates.set(name, (g = { opened, open, started, start }))
    }
    return g
  }
  return {
    /** a gate: `started` resolves when a prompt naming it reached the model, `open()` lets it answer */
    gate,
    async chat(
      body: { messages: Array<{ content: string }> },
      stream: () => { delta(d: unknown): void; end(): void },
      res: ServerResponse
    ) {
      const prompt = body.messages.map((m) => m.content).join('\n')
      // a model that is down: every call answered 503 (the run gives up after its retries)
      if (prompt.includes('MODEL_DOWN')) {
        res.writeHead(503, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: { message: 'the model is overloaded' } }))
        return
      }
      const named = /GATE:(\w+)/.exec(prompt)
      if (named) {
        const g = gate(named[1]!)
        g.start()
        await g.opened
      }
      const chat = stream()
      chat.delta({ content: 'The answer ' })
      chat.delta({ content: `to "${/\[(.*?)\]/.exec(prompt)?.[1] ?? 'that'}" is 42.` })
      chat.end()
    }
  }
}

const model = gatedModel()
const upstream = await startOpenAiUpstream(t, {
  models: ['cairn-test-model'],
  chat: (body, stream, res) => model.chat(body, stream, res)
})
const fake = await startFakeSlack(t)
const ENV = {
  SLACK_API_URL: fake.url,
  OPENAI_BASE_URL: upstream,
  RUN_POLL_MS: '50',
  MODEL_RETRY_BASE_MS: '1',
  SLACK_RETRY_BASE_MS: '20',
  SLACK_OUTBOX_POLL_MS: '100',
  ALLOW_DEV_ORG: 'false',
  SECRETS_KEY: newKeyText()
}
const app = await buildTestApp(t, { env: ENV })

async function connected(): Promise<{ slack: SlackApp; owner: Awaited<ReturnType<typeof signUpWithOrg>> }> {
  const owner = await signUpWithOrg(app)
  const slack = installApp(fake)
  const res = await connectSlack(app, owner.cookie, slack)
  if (res.statusCode !== 200) throw new Error(res.body)
  return { slack, owner }
}

/** The run a Slack message started. */
async function runOf(a: FastifyInstance, ts: string) {
  return waitFor(
    `the run of ${ts}`,
    async () =>
      rowsOf<{ id: string; status: string; engine: string }>(
        await a.db.execute(sql`select id, status, engine from runs where metadata->'slack'->>'ts' = ${ts}`)
      )[0]
  )
}
const replyRow = async (a: FastifyInstance, runId: string) =>
  rowsOf<{ state: string; attempts: number; reply_ts: string | null; last_error: string | null; uncertain: boolean }>(
    await a.db.execute(
      sql`select state, attempts, reply_ts, last_error, uncertain from slack_replies where run_id = ${runId}`
    )
  )[0]!
const repliesTo = (f: FakeSlack, runId: string) => f.messages.filter((m) => m.metadata?.event_payload?.run_id === runId)
/** Waits until the reply row is settled (sent or failed), on the outbox's own time. */
const settled = (a: FastifyInstance, runId: string) =>
  waitFor(`the reply of ${runId}`, async () => {
    const row = await replyRow(a, runId)
    return row.state === 'sent' || row.state === 'failed' ? row : null
  })

t.test('the ack comes while the engine is still working; the answer is posted once, in the thread', async (t) => {
  const { slack } = await connected()
  const gate = model.gate('ask')
  const pair = mentionPair(slack, { text: 'GATE:ask [what is six times seven]', channel: 'C0ASK' })
  const ack = await sendEvent(app, slack, pair.mention)
  t.equal(ack.statusCode, 200)
  t.same(ack.json(), { ok: true })
  const run = await runOf(app, pair.mention.ts)
  t.equal(run.engine, 'openai', 'a real model, when one is configured')
  // the engine has the prompt and is waiting on the gate: the acknowledgement did not wait for it
  await gate.started
  t.equal((await runOf(app, pair.mention.ts)).status, 'running', 'acknowledged while the run is still running')
  t.equal(repliesTo(fake, run.id).length, 0, 'nothing posted before the run ends')
  t.equal((await replyRow(app, run.id)).state, 'waiting')

  gate.open()
  await fake.until(() => repliesTo(fake, run.id).length === 1)
  const row = await settled(app, run.id)
  const [posted] = repliesTo(fake, run.id)
  t.match(posted, {
    channel: 'C0ASK',
    thread_ts: pair.mention.ts,
    text: 'The answer to "what is six times seven" is 42.',
    token: slack.botToken
  })
  t.match(row, { state: 'sent', attempts: 1, reply_ts: posted!.ts, last_error: null })
  t.equal((await runOf(app, pair.mention.ts)).status, 'succeeded')
  // the message event of the same message, arriving late, changes nothing
  t.equal((await sendEvent(app, slack, pair.message)).statusCode, 200)
  t.equal(repliesTo(fake, run.id).length, 1)
})

t.test('a model that cannot be reached: the thread is told so, the question is never echoed back', async (t) => {
  const { slack } = await connected()
  const pair = mentionPair(slack, { text: 'MODEL_DOWN Is prod healthy?', channel: 'C0DOWN' })
  t.equal((await sendEvent(app, slack, pair.mention)).statusCode, 200)
  const run = await runOf(app, pair.mention.ts)
  t.equal(run.engine, 'openai', 'the configured model, not echo')
  await fake.until(() => repliesTo(fake, run.id).length === 1)
  const [posted] = repliesTo(fake, run.id)
  t.match(posted, { channel: 'C0DOWN', thread_ts: pair.mention.ts })
  t.match(posted!.text, /^Sorry, the model could not be reached, so there is no answer this time\./)
  t.match(posted!.text, /HTTP 503: the model is overloaded/, 'the cause, for whoever is on call')
  t.notMatch(posted!.text, /Is prod healthy/, 'never the question echoed back')
  t.match((await runOf(app, pair.mention.ts)).status, 'failed')
})

t.test('a failed post is retried: exactly one reply', async (t) => {
  const { slack } = await connected()
  for (const [name, plan] of [
    ['HTTP 500', { http500: true }],
    ['ok:false internal_error', { error: 'internal_error' }],
    ['429 with Retry-After', { rateLimit: 1 }]
  ] as const) {
    const lookups = fake.calls['conversations.replies'] ?? 0
    fake.postPlan.push(plan)
    const pair = mentionPair(slack, { text: `[${name}]` })
    t.equal((await sendEvent(app, slack, pair.mention)).statusCode, 200)
    const run = await runOf(app, pair.mention.ts)
    const row = await settled(app, run.id)
    t.match(row, { state: 'sent', attempts: 2 }, `${name}: sent on the second attempt`)
    t.equal(repliesTo(fake, run.id).length, 1, `${name}: one reply`)
    t.equal(row.reply_ts, repliesTo(fake, run.id)[0]!.ts)
    // a 500 or internal_error may have posted: the retry looked first; a 429 posted nothing
    t.equal(
      (fake.calls['conversations.replies'] ?? 0) - lookups,
      'rateLimit' in plan ? 0 : 1,
      `${name}: looked for an earlier reply only when one may exist`
    )
  }
})

t.test('a post that landed but whose answer was lost is not posted again', async (t) => {
  const { slack } = await connected()
  fake.postPlan.push({ loseAnswer: true })
  const pair = mentionPair(slack, { text: '[lost answer]' })
  await sendEvent(app, slack, pair.mention)
  const run = await runOf(app, pair.mention.ts)
  const row = await settled(app, run.id)
  const replies = repliesTo(fake, run.id)
  t.equal(replies.length, 1, 'one reply in the thread')
  t.match(row, { state: 'sent', attempts: 2, reply_ts: replies[0]!.ts })
})

t.test('refusals that would repeat give the reply up; a refused token shows on the integration', async (t) => {
  const { slack, owner } = await connected()
  fake.postPlan.push({ error: 'channel_not_found' })
  const pair = mentionPair(slack, { text: '[gone channel]' })
  await sendEvent(app, slack, pair.mention)
  const run = await runOf(app, pair.mention.ts)
  const row = await settled(app, run.id)
  t.match(row, { state: 'failed', attempts: 1, last_error: /channel_not_found/ })
  t.equal(repliesTo(fake, run.id).length, 0)

  fake.postPlan.push({ error: 'invalid_auth' })
  const second = mentionPair(slack, { text: '[revoked token]' })
  await sendEvent(app, slack, second.mention)
  const run2 = await runOf(app, second.mention.ts)
  t.match(await settled(app, run2.id), { state: 'failed', last_error: /invalid_auth/ })
  const list = (await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })).json()
  t.match(
    list.items.find((i: { kind: string }) => i.kind === 'slack'),
    { connected: true, lastError: /invalid_auth/ }
  )

  // the next reply that goes through clears it
  const third = mentionPair(slack, { text: '[works again]' })
  await sendEvent(app, slack, third.mention)
  t.match(await settled(app, (await runOf(app, third.mention.ts)).id), { state: 'sent' })
  const after = (
    await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })
  ).json()
  t.match(
    after.items.find((i: { kind: string }) => i.kind === 'slack'),
    { lastError: null }
  )
})

t.test('runs that end another way get a reply too: cancelled, and disconnected orgs get none', async (t) => {
  const { slack, owner } = await connected()
  const gate = model.gate('cancel')
  const pair = mentionPair(slack, { text: 'GATE:cancel [to be cancelled]' })
  await sendEvent(app, slack, pair.mention)
  const run = await runOf(app, pair.mention.ts)
  await gate.started
  const cancel = await app.inject({
    method: 'POST',
    url: `/api/runs/${run.id}/cancel`,
    headers: { cookie: owner.cookie }
  })
  t.equal(cancel.statusCode, 200)
  const row = await settled(app, run.id)
  t.equal((await runOf(app, pair.mention.ts)).status, 'cancelled')
  t.equal(row.state, 'sent')
  t.same(
    repliesTo(fake, run.id).map((m) => m.text),
    ['The run was cancelled.']
  )
  gate.open()

  // disconnected between the mention and the answer: nothing to post with
  const other = await connected()
  const late = model.gate('late')
  const pair2 = mentionPair(other.slack, { text: 'GATE:late [never answered]' })
  await sendEvent(app, other.slack, pair2.mention)
  const lateRun = await runOf(app, pair2.mention.ts)
  await late.started
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/integrations/slack', headers: { cookie: other.owner.cookie } }))
      .statusCode,
    204
  )
  late.open()
  t.match(await settled(app, lateRun.id), { state: 'failed', last_error: /not connected/ })
  t.equal((await runOf(app, pair2.mention.ts)).status, 'succeeded')
  t.equal(repliesTo(fake, lateRun.id).length, 0)
})

t.test('an instance that dies mid-post: another takes the reply over and does not post it twice', async (t) => {
  const slackFake = await startFakeSlack(t)
  const env = { ...ENV, SLACK_API_URL: slackFake.url, SLACK_OUTBOX_LEASE_MS: '300', SLACK_TIMEOUT_MS: '60000' }
  const first = await buildTestApp(t, { env })
  const second = await buildTestApp(t, {
    env: { ...env, SLACK_OUTBOX: 'false' },
    db: await secondHandle(t, first.testDb)
  })
  const owner = await signUpWithOrg(first)
  const slack = installApp(slackFake)
  t.equal((await connectSlack(first, owner.cookie, slack)).statusCode, 200)

  // the first instance's post reaches Slack, and the instance dies before the answer
  slackFake.postPlan.push({ hold: true })
  const pair = mentionPair(slack, { text: '[dies mid-post]' })
  await sendEvent(first, slack, pair.mention)
  const run = await runOf(first, pair.mention.ts)
  await slackFake.until(() => repliesTo(slackFake, run.id).length === 1)
  first.slack.outbox.kill()
  t.equal((await replyRow(first, run.id)).state, 'posting', 'claimed, and never recorded')

  // the second instance takes it over when the lease expires, finds the reply and records it
  second.slack.outbox.start()
  const row = await settled(second, run.id)
  t.match(row, { state: 'sent', attempts: 2, reply_ts: repliesTo(slackFake, run.id)[0]!.ts })
  t.equal(repliesTo(slackFake, run.id).length, 1, 'one reply')
  t.equal(slackFake.calls['chat.postMessage'], 1, 'posted once')
})

t.test('a run that ended while no outbox ran (a queued run cancelled) is answered when one starts', async (t) => {
  const quiet = await buildTestApp(t, { env: { ...ENV, SLACK_OUTBOX: 'false', RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(quiet)
  const slack = installApp(fake)
  t.equal((await connectSlack(quiet, owner.cookie, slack)).statusCode, 200)
  const pair = mentionPair(slack, { text: '[never started]' })
  await sendEvent(quiet, slack, pair.mention)
  const run = await runOf(quiet, pair.mention.ts)
  t.equal(
    (
      await quiet.inject({ method: 'POST', url: `/api/runs/${run.id}/cancel`, headers: { cookie: owner.cookie } })
    ).json().run.status,
    'cancelled'
  )
  t.equal((await replyRow(quiet, run.id)).state, 'waiting', 'no outbox heard the run end')

  quiet.slack.outbox.start()
  t.match(await settled(quiet, run.id), { state: 'sent', attempts: 1 })
  t.same(
    repliesTo(fake, run.id).map((m) => m.text),
    ['The run was cancelled.']
  )
})
