import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import { appendEvent } from '../../src/runs/events.js'
import { runs } from '../../src/runs/tables.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { MAX_ARGUMENTS_CHARS } from '../../src/slack/approval-message.js'
import { slackReplies, slackThreads } from '../../src/slack/tables.js'
import { buildTestApp, secondHandle, signUpWithOrg, waitFor } from '../helper.js'
import { startFakeSlack, type FakeMessage, type FakeSlack } from './fake-slack.js'
import {
  blockActions,
  click,
  connectSlack,
  installApp,
  interactionForm,
  messageTs,
  nowSeconds,
  postInteraction,
  signedFormHeaders,
  type SlackApp
} from './helpers.js'

/**
 * Approving from Slack: a Slack-started run that stops for people's decisions
 * (`requires_action`, event `run.requires_action {approvalIds}`) gets one message in its
 * thread with Approve and Deny buttons; a signed click decides the call as the Slack user.
 * The run worker's side is not here: each test makes the stop itself (the run row, its
 * reply row, pending approvals, and the events the worker stores), then watches Slack.
 */

const fake = await startFakeSlack(t)
const ENV = {
  SLACK_API_URL: fake.url,
  RUN_WORKER_CONCURRENCY: '0',
  SLACK_OUTBOX_POLL_MS: '100',
  SLACK_RETRY_BASE_MS: '20',
  ALLOW_DEV_ORG: 'false',
  SECRETS_KEY: newKeyText()
}
const app = await buildTestApp(t, { env: ENV })

type Owner = Awaited<ReturnType<typeof signUpWithOrg>>

async function connected(a: FastifyInstance = app, f: FakeSlack = fake): Promise<{ slack: SlackApp; owner: Owner }> {
  const owner = await signUpWithOrg(a)
  const slack = installApp(f)
  const res = await connectSlack(a, owner.cookie, slack)
  if (res.statusCode !== 200) throw new Error(res.body)
  return { slack, owner }
}

interface Stop {
  runId: string
  approvalIds: string[]
  channel: string
  threadTs: string
  eventId: number
}

/**
 * A run of the org waiting for decisions on `calls`, as the worker leaves it: status
 * `requires_action`, its tool_approvals rows pending, `approval.requested` events, then
 * `run.requires_action` stored and published. `slack` makes it a run started from that
 * workspace (a thread and a reply row); `publish: false` stores no event at all.
 */
async function stop(
  a: FastifyInstance,
  orgId: string,
  slack: SlackApp | null,
  calls: Array<{ tool: string; arguments: Record<string, unknown>; expiresInMs?: number }>,
  o: { publish?: boolean } = {}
): Promise<Stop> {
  const runId = newId()
  const threadTs = messageTs()
  const channel = 'C0APPROVE'
  await a.db.insert(runs).values({
    id: runId,
    orgId,
    rootRunId: runId,
    engine: 'echo',
    prompt: 'clean the build',
    status: 'requires_action',
    origin: slack ? 'chatplatform' : 'api',
    metadata: slack
      ? { slack: { teamId: slack.teamId, channel, ts: threadTs, threadTs, user: 'UHUMAN1', eventId: null } }
      : {}
  })
  if (slack) {
    await a.db.insert(slackThreads).values({ teamId: slack.teamId, channel, threadTs, orgId, rootRunId: runId })
    await a.db
      .insert(slackReplies)
      .values({ runId, orgId, teamId: slack.teamId, channel, threadTs, messageTs: threadTs })
  }
  const approvalIds: string[] = []
  for (const [i, call] of calls.entries()) {
    const id = newId()
    approvalIds.push(id)
    const expiresAt = new Date(Date.now() + (call.expiresInMs ?? 600_000))
    await a.db.insert(toolApprovals).values({
      id,
      orgId,
      runId,
      rootRunId: runId,
      callId: `call_${i}`,
      tool: call.tool,
      arguments: call.arguments,
      expiresAt
    })
    if (o.publish !== false) {
      await appendEvent(a.db, {
        orgId,
        runId,
        rootRunId: runId,
        type: 'approval.requested',
        data: {
          approvalId: id,
          callId: `call_${i}`,
          tool: call.tool,
          arguments: call.arguments,
          expiresAt: expiresAt.toISOString()
        }
      })
    }
  }
  let eventId = 0
  if (o.publish !== false)
    eventId = (
      await appendEvent(a.db, { orgId, runId, rootRunId: runId, type: 'run.requires_action', data: { approvalIds } })
    ).id
  return { runId, approvalIds, channel, threadTs, eventId }
}

const requestsOf = (f: FakeSlack, runId: string) =>
  f.messages.filter(
    (m) => m.metadata?.event_type === 'cairn_approval_request' && m.metadata.event_payload?.run_id === runId
  )
const messageRow = async (a: FastifyInstance, runId: string) =>
  rowsOf<{
    event_id: string | number
    state: string
    attempts: number
    message_ts: string | null
    approval_ids: unknown
    last_error: string | null
  }>(await a.db.execute(sql`select * from slack_approval_messages where run_id = ${runId}`))
const approvalRow = async (a: FastifyInstance, id: string) =>
  rowsOf<{ status: string; decided_by: string | null; decided_at: unknown }>(
    await a.db.execute(sql`select status, decided_by, decided_at from tool_approvals where id = ${id}`)
  )[0]!
const resolvedEvents = async (a: FastifyInstance, runId: string) =>
  rowsOf<{ data: unknown }>(
    await a.db.execute(
      sql`select data from run_events where run_id = ${runId} and type = 'approval.resolved' order by id`
    )
  ).map((r) => (typeof r.data === 'string' ? JSON.parse(r.data) : r.data) as Record<string, unknown>)
/** The one approval request of a run, once posted and recorded. */
async function posted(a: FastifyInstance, f: FakeSlack, runId: string): Promise<FakeMessage> {
  await f.until(() => requestsOf(f, runId).length > 0)
  await settled(a, runId, 'sent')
  return requestsOf(f, runId)[0]!
}
/** Waits until the run's message row reaches `state`, on the outbox's own time. */
const settled = (a: FastifyInstance, runId: string, state: string) =>
  waitFor(`the approval request of ${runId} to be ${state}`, async () =>
    (await messageRow(a, runId)).find((row) => row.state === state)
  )
/** The blocks of a message by type. */
const blocksOf = (m: { blocks: Array<Record<string, unknown>> | undefined }, type: string) =>
  (m.blocks ?? []).filter((b) => b.type === type)
const buttonsOf = (m: { blocks: Array<Record<string, unknown>> | undefined }) =>
  blocksOf(m, 'actions').flatMap(
    (b) => b.elements as Array<{ action_id: string; value: string; style: string; text: { text: string } }>
  )
const textOf = (m: { blocks: Array<Record<string, unknown>> | undefined }) => JSON.stringify(m.blocks)

t.test('a Slack run that stops for approval posts one message in its thread, with Approve and Deny', async (t) => {
  const { slack, owner } = await connected()
  const s = await stop(app, owner.org.id, slack, [
    { tool: 'shell', arguments: { command: 'rm -rf build', env: '[redacted]' } }
  ])
  const message = await posted(app, fake, s.runId)
  t.match(message, { channel: s.channel, thread_ts: s.threadTs, token: slack.botToken, text: 'Approval needed: shell' })
  t.same(
    buttonsOf(message).map((b) => [b.action_id, b.value, b.text.text, b.style]),
    [
      ['cairn_approve', s.approvalIds[0], 'Approve', 'primary'],
      ['cairn_deny', s.approvalIds[0], 'Deny', 'danger']
    ],
    'one pair of buttons, carrying the approval id'
  )
  t.match(textOf(message), /\*shell\*/)
  t.match(textOf(message), /rm -rf build/, 'the arguments are shown')
  t.match(textOf(message), /\[redacted\]/, 'as stored: already redacted')
  const [row] = await messageRow(app, s.runId)
  t.match(
    row,
    { state: 'sent', attempts: 1, message_ts: message.ts, last_error: null },
    "Slack's ts is kept for updates"
  )
  t.equal(Number(row!.event_id), s.eventId, 'keyed by the run.requires_action event')

  // nothing makes a second one: the sweep finds the row, a round claims nothing
  t.equal(await app.slack.approvalRequests.sweep(), 0)
  t.equal(await app.slack.approvalRequests.runOnce(), 0)
  t.equal(requestsOf(fake, s.runId).length, 1, 'exactly one message')
})

t.test(
  'several calls in one stop: one message, a pair of buttons each; arguments bounded; markup escaped',
  async (t) => {
    const { slack, owner } = await connected()
    const s = await stop(app, owner.org.id, slack, [
      {
        tool: 'write_file',
        arguments: {
          path: 'notes.md',
          content: `<!channel> <@U0BOSS> <https://evil.test|click> & \`\`\` ${'x'.repeat(5000)}`
        }
      },
      { tool: 'shell', arguments: { command: 'ls' } }
    ])
    const message = await posted(app, fake, s.runId)
    t.equal(requestsOf(fake, s.runId).length, 1)
    t.same(
      buttonsOf(message).map((b) => [b.action_id, b.value]),
      [
        ['cairn_approve', s.approvalIds[0]],
        ['cairn_deny', s.approvalIds[0]],
        ['cairn_approve', s.approvalIds[1]],
        ['cairn_deny', s.approvalIds[1]]
      ]
    )
    t.equal(message.text, 'Approval needed: write_file, shell')
    const sections = blocksOf(message, 'section').map((b) => (b.text as { text: string }).text)
    const writeFile = sections.find((text) => text.startsWith('*write_file*'))!
    t.ok(writeFile.length < MAX_ARGUMENTS_CHARS * 2, `the arguments are cut (${writeFile.length} characters)`)
    t.match(writeFile, /…```$/, 'and say so')
    t.match(
      writeFile,
      /&lt;!channel&gt; &lt;@U0BOSS&gt; &lt;https:\/\/evil.test\|click&gt; &amp;/,
      'no mention or link from the arguments'
    )
    t.equal(writeFile.split('```').length, 3, 'one code block: the arguments cannot close it early')
    t.match(
      sections.find((text) => text.startsWith('*shell*')),
      /"command": "ls"/
    )
  }
)

t.test('runs not started from Slack post nothing; a stop the bus missed is found by the sweep', async (t) => {
  const { slack, owner } = await connected()
  const apiRun = await stop(app, owner.org.id, null, [{ tool: 'shell', arguments: { command: 'date' } }])
  const slackRun = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'date' } }])
  await posted(app, fake, slackRun.runId)
  t.same(await messageRow(app, apiRun.runId), [], 'an API run has no Slack thread')
  t.equal(requestsOf(fake, apiRun.runId).length, 0)

  // an instance with no outbox running when the run stopped (or a notification lost)
  const quietFake = await startFakeSlack(t)
  const quiet = await buildTestApp(t, { env: { ...ENV, SLACK_API_URL: quietFake.url, SLACK_OUTBOX: 'false' } })
  const q = await connected(quiet, quietFake)
  const missed = await stop(quiet, q.owner.org.id, q.slack, [{ tool: 'shell', arguments: { command: 'uptime' } }])
  t.same(await messageRow(quiet, missed.runId), [], 'nobody heard it')
  quiet.slack.approvalRequests.start()
  const message = await posted(quiet, quietFake, missed.runId)
  t.equal(message.thread_ts, missed.threadTs)
  t.equal(requestsOf(quietFake, missed.runId).length, 1)
})

t.test('a stop whose approvals were all decided before its turn posts nothing', async (t) => {
  const quietFake = await startFakeSlack(t)
  const quiet = await buildTestApp(t, { env: { ...ENV, SLACK_API_URL: quietFake.url, SLACK_OUTBOX: 'false' } })
  const { slack, owner } = await connected(quiet, quietFake)
  const s = await stop(quiet, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'whoami' } }])
  await quiet.runtime.gateway.decide(owner.org.id, s.runId, s.approvalIds[0]!, 'approve', owner.user.id)
  quiet.slack.approvalRequests.start()
  await settled(quiet, s.runId, 'skipped')
  t.equal(requestsOf(quietFake, s.runId).length, 0)
})

t.test('Slack errors are retried: a 429 waits its Retry-After, a 5xx is looked for before posting again', async (t) => {
  const { slack, owner } = await connected()
  for (const [name, plan] of [
    ['429', { rateLimit: 1 }],
    ['HTTP 500', { http500: true }],
    ['lost answer', { loseAnswer: true }]
  ] as const) {
    const lookups = fake.calls['conversations.replies'] ?? 0
    fake.postPlan.push(plan)
    const s = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: name } }])
    const message = await posted(app, fake, s.runId)
    const [row] = await messageRow(app, s.runId)
    t.match(row, { state: 'sent', attempts: 2, message_ts: message.ts }, `${name}: sent on the second attempt`)
    t.equal(requestsOf(fake, s.runId).length, 1, `${name}: one message`)
    t.equal(
      (fake.calls['conversations.replies'] ?? 0) - lookups,
      'rateLimit' in plan ? 0 : 1,
      `${name}: looked in the thread only when the first may have landed`
    )
  }
  fake.postPlan.push({ error: 'channel_not_found' })
  const gone = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'gone' } }])
  t.match(
    await settled(app, gone.runId, 'failed'),
    { attempts: 1, last_error: /channel_not_found/ },
    'a refusal that would repeat gives it up'
  )
})

t.test(
  'two instances on one database post each stop once; one that dies mid-post is taken over without a second post',
  async (t) => {
    const f = await startFakeSlack(t)
    const env = { ...ENV, SLACK_API_URL: f.url, SLACK_OUTBOX_LEASE_MS: '1000', SLACK_TIMEOUT_MS: '60000' }
    const first = await buildTestApp(t, { env })
    const second = await buildTestApp(t, { env, db: await secondHandle(t, first.testDb) })
    const { slack, owner } = await connected(first, f)
    const stops = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        stop(i % 2 ? first : second, owner.org.id, slack, [{ tool: 'shell', arguments: { command: `echo ${i}` } }])
      )
    )
    for (const s of stops) await posted(first, f, s.runId)
    for (const a of [first, second]) {
      t.equal(await a.slack.approvalRequests.sweep(), 0)
      t.equal(await a.slack.approvalRequests.runOnce(), 0)
    }
    t.same(
      stops.map((s) => requestsOf(f, s.runId).length),
      [1, 1, 1, 1, 1, 1],
      'one message per stop'
    )
    t.equal(f.calls['chat.postMessage'], 6)

    // the instance posting dies before Slack's answer; the other one finds the message
    second.slack.approvalRequests.kill()
    f.postPlan.push({ hold: true })
    const s = await stop(first, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'held' } }])
    await f.until(() => requestsOf(f, s.runId).length === 1)
    first.slack.approvalRequests.kill()
    t.equal((await messageRow(first, s.runId))[0]!.state, 'posting', 'claimed, and never recorded')
    const third = await buildTestApp(t, { env, db: await secondHandle(t, first.testDb) })
    const message = await posted(third, f, s.runId)
    t.match((await messageRow(third, s.runId))[0], { state: 'sent', attempts: 2, message_ts: message.ts })
    t.equal(requestsOf(f, s.runId).length, 1, 'one message')
    t.equal(f.calls['chat.postMessage'], 7, 'posted once')
  }
)

t.test(
  'Approve: the call is approved as the Slack user, approval.resolved is stored, the message says who',
  async (t) => {
    const { slack, owner } = await connected()
    const s = await stop(app, owner.org.id, slack, [
      { tool: 'shell', arguments: { command: 'make deploy' } },
      { tool: 'read_file', arguments: { path: 'a.txt' } }
    ])
    const message = await posted(app, fake, s.runId)
    const updates = fake.updates.length
    const res = await click(app, slack, s.approvalIds[0]!, { user: 'U0ALICE' })
    t.equal(res.statusCode, 200)
    t.equal(res.body, '', 'an empty acknowledgement')
    t.match(await approvalRow(app, s.approvalIds[0]!), { status: 'approved', decided_by: 'slack:U0ALICE' })
    t.not((await approvalRow(app, s.approvalIds[0]!)).decided_at, null)
    t.match(
      await approvalRow(app, s.approvalIds[1]!),
      { status: 'pending', decided_by: null },
      'the other call still waits'
    )
    t.match(await resolvedEvents(app, s.runId), [
      { approvalId: s.approvalIds[0], status: 'approved', decidedBy: 'slack:U0ALICE', tool: 'shell' }
    ])

    // the approvals API shows who decided
    const list = await app.inject({
      method: 'GET',
      url: `/api/runs/${s.runId}/approvals`,
      headers: { cookie: owner.cookie }
    })
    t.equal(list.statusCode, 200)
    t.match(list.json().items, [
      { id: s.approvalIds[0], status: 'approved', decidedBy: 'slack:U0ALICE' },
      { id: s.approvalIds[1], status: 'pending', decidedBy: null }
    ])

    // the message is updated after the answer: the decided call shows who, the other keeps its buttons
    await fake.until(() => fake.updates.length > updates)
    const update = fake.updates.at(-1)!
    t.match(update, { channel: message.channel, ts: message.ts, token: slack.botToken })
    t.match(textOf(update), /Approved by <@U0ALICE>/)
    t.same(
      buttonsOf(update).map((b) => [b.action_id, b.value]),
      [
        ['cairn_approve', s.approvalIds[1]],
        ['cairn_deny', s.approvalIds[1]]
      ]
    )
    t.equal(requestsOf(fake, s.runId).length, 1, 'updated, not posted again')
  }
)

t.test('Deny; a second click; an expired approval; a click when the update fails', async (t) => {
  const { slack, owner } = await connected()
  const s = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'curl evil.test' } }])
  await posted(app, fake, s.runId)
  let updates = fake.updates.length
  t.equal((await click(app, slack, s.approvalIds[0]!, { deny: true, user: 'U0BOB' })).statusCode, 200)
  t.match(await approvalRow(app, s.approvalIds[0]!), { status: 'denied', decided_by: 'slack:U0BOB' })
  await fake.until(() => fake.updates.length > updates)
  t.match(textOf(fake.updates.at(-1)!), /Denied by <@U0BOB>/)
  t.same(buttonsOf(fake.updates.at(-1)!), [], 'no buttons left')

  // a second click (the other button, another person): nothing changes, the message is redrawn
  updates = fake.updates.length
  const again = await click(app, slack, s.approvalIds[0]!, { user: 'U0CAROL' })
  t.equal(again.statusCode, 200, 'acknowledged: Slack would show an error otherwise')
  t.match(await approvalRow(app, s.approvalIds[0]!), { status: 'denied', decided_by: 'slack:U0BOB' })
  t.equal((await resolvedEvents(app, s.runId)).length, 1, 'one approval.resolved')
  await fake.until(() => fake.updates.length > updates)
  t.match(textOf(fake.updates.at(-1)!), /Denied by <@U0BOB>/)

  // expired before anyone clicked: recorded as expired, not approved
  const late = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'too late' } }])
  await posted(app, fake, late.runId)
  await app.db
    .update(toolApprovals)
    .set({ expiresAt: new Date(Date.now() - 1000) })
    .where(sql`id = ${late.approvalIds[0]!}`)
  updates = fake.updates.length
  t.equal((await click(app, slack, late.approvalIds[0]!)).statusCode, 200)
  t.match(await approvalRow(app, late.approvalIds[0]!), { status: 'expired', decided_by: null })
  t.same(await resolvedEvents(app, late.runId), [])
  await fake.until(() => fake.updates.length > updates)
  t.match(textOf(fake.updates.at(-1)!), /Expired/)

  // Slack refuses the update: the decision stands, the answer is still 200
  const third = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'ok' } }])
  await posted(app, fake, third.runId)
  const calls = fake.calls['chat.update'] ?? 0
  fake.updatePlan.push({ error: 'message_not_found' })
  t.equal((await click(app, slack, third.approvalIds[0]!)).statusCode, 200)
  t.match(await approvalRow(app, third.approvalIds[0]!), { status: 'approved' })
  await fake.until(() => (fake.calls['chat.update'] ?? 0) > calls)
})

t.test('refused requests change nothing: bad signature, old timestamp, tampered body, no headers', async (t) => {
  const { slack, owner } = await connected()
  const s = await stop(app, owner.org.id, slack, [{ tool: 'shell', arguments: { command: 'rm -rf /' } }])
  await posted(app, fake, s.runId)
  const body = interactionForm(blockActions(slack, { actionId: 'cairn_approve', value: s.approvalIds[0]! }))
  const cases: Array<[string, string, Record<string, string>]> = [
    ['another secret', body, signedFormHeaders('not-the-secret', body)],
    ['a timestamp over 5 minutes old', body, signedFormHeaders(slack.signingSecret, body, String(nowSeconds() - 301))],
    // well past the window: the service reads its clock a moment later, maybe in the next second
    ['a timestamp from the future', body, signedFormHeaders(slack.signingSecret, body, String(nowSeconds() + 330))],
    [
      'a tampered body (signed for approve, sent as deny)',
      body.replace('cairn_approve', 'cairn_deny'),
      signedFormHeaders(slack.signingSecret, body)
    ],
    ['no signature headers', body, { 'content-type': 'application/x-www-form-urlencoded' }]
  ]
  for (const [name, sent, headers] of cases) {
    const res = await postInteraction(app, sent, headers)
    t.equal(res.statusCode, 401, name)
    t.match(res.json(), { error: 'unauthorized', message: String }, `${name}: the contract's error body`)
  }
  t.match(await approvalRow(app, s.approvalIds[0]!), { status: 'pending', decided_by: null })
  t.same(await resolvedEvents(app, s.runId), [])
  // the same body, signed: taken
  t.equal((await postInteraction(app, body, signedFormHeaders(slack.signingSecret, body))).statusCode, 200)
  t.match(await approvalRow(app, s.approvalIds[0]!), { status: 'approved', decided_by: 'slack:UHUMAN1' })
})

t.test('other workspaces, other payloads and other buttons change nothing', async (t) => {
  const a = await connected()
  const b = await connected()
  const s = await stop(app, a.owner.org.id, a.slack, [{ tool: 'shell', arguments: { command: 'tenancy' } }])
  await posted(app, fake, s.runId)
  const id = s.approvalIds[0]!

  // B's workspace clicking A's approval id (B's own secret, B's team): not B's org's
  t.equal((await click(app, b.slack, id)).statusCode, 200, 'acknowledged, nothing done')
  // A's team named, signed with B's secret: not Slack's request for A
  const forged = interactionForm(blockActions(a.slack, { actionId: 'cairn_approve', value: id }))
  t.equal((await postInteraction(app, forged, signedFormHeaders(b.slack.signingSecret, forged))).statusCode, 401)
  // other interactions, and other buttons
  const others = [
    { type: 'view_submission', team: { id: a.slack.teamId }, user: { id: 'UHUMAN1' }, view: { id: 'V1' } },
    { type: 'shortcut', team: { id: a.slack.teamId }, user: { id: 'UHUMAN1' }, callback_id: 'x' },
    blockActions(a.slack, { actionId: 'someone_elses_button', value: id }),
    { ...blockActions(a.slack, { actionId: 'cairn_approve', value: id }), user: {} }
  ]
  for (const payload of others) {
    const body = interactionForm(payload)
    const res = await postInteraction(app, body, signedFormHeaders(a.slack.signingSecret, body))
    t.equal(res.statusCode, 200, `${String(payload.type)}: acknowledged`)
  }
  // an approval of A's org that no Slack message listed (an API run's)
  const apiRun = await stop(app, a.owner.org.id, null, [{ tool: 'shell', arguments: { command: 'not in slack' } }])
  t.equal((await click(app, a.slack, apiRun.approvalIds[0]!)).statusCode, 200)
  t.match(await approvalRow(app, apiRun.approvalIds[0]!), { status: 'pending' })

  t.match(await approvalRow(app, id), { status: 'pending', decided_by: null }, 'still waiting')
  t.same(await resolvedEvents(app, s.runId), [])

  // a signed body that is not an interaction form is refused by validation
  for (const body of [
    'payload=not-json',
    'nothing=here',
    `payload=${encodeURIComponent(JSON.stringify({ type: 'block_actions', team: { id: a.slack.teamId }, actions: 'no' }))}`
  ]) {
    const res = await postInteraction(app, body, signedFormHeaders(a.slack.signingSecret, body))
    t.equal(res.statusCode, body.startsWith('payload=%7B') ? 400 : 401, `${body.slice(0, 20)}: ${res.statusCode}`)
  }
})
