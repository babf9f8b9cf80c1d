import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, signUpWithOrg, waitFor } from '../helper.js'
import { shellCall, startToolModel } from '../runs/tool-model.js'
import { startFakeSlack } from './fake-slack.js'
import { click, connectSlack, installApp, mentionPair, sendEvent } from './helpers.js'

/**
 * The whole way from Slack: a mention starts a run on the org's default model, the model
 * asks for a shell call, the run waits for approval without a worker and its Slack thread
 * gets the Approve and Deny message; a click on Approve lets the run go on, the command runs
 * once, and the answer is posted in the thread.
 */
t.test('a Slack-started run waits for approval, is approved from Slack, and answers in the thread', async (t) => {
  const model = await startToolModel(t)
  const fake = await startFakeSlack(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-slack-approvals-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const app = await buildTestApp(t, {
    env: {
      SLACK_API_URL: fake.url,
      OPENAI_BASE_URL: model.url,
      MODELS: 'tool-model',
      RUN_POLL_MS: '50',
      RUN_WORKER_CONCURRENCY: '1',
      SLACK_OUTBOX_POLL_MS: '100',
      SLACK_RETRY_BASE_MS: '20',
      ALLOW_DEV_ORG: 'false',
      SECRETS_KEY: newKeyText(),
      DATA_DIR: dataDir,
      SANDBOX_UNCONFINED: 'true'
    }
  })
  const owner = await signUpWithOrg(app)
  const slack = installApp(fake)
  t.equal((await connectSlack(app, owner.cookie, slack)).statusCode, 200)
  model.script.push(shellCall('echo ran >> ran.txt; echo "executions: $(wc -l < ran.txt)"'), {
    text: 'Done: the command ran once.'
  })

  const pair = mentionPair(slack, { text: 'please run the counter', channel: 'C0RUN' })
  t.equal((await sendEvent(app, slack, pair.mention)).statusCode, 200)
  const run = await waitFor(
    'the run to wait for approval',
    async () =>
      rowsOf<{ id: string; status: string; engine: string }>(
        await app.db.execute(
          sql`select id, status, engine from runs where metadata->'slack'->>'ts' = ${pair.mention.ts} and status = 'requires_action'`
        )
      )[0]
  )
  t.equal(run.engine, 'openai', "the org's default model, not echo")
  t.equal(app.runs.worker.activeCount, 0, 'no worker waits with it')

  const request = await waitFor('the approval message', async () =>
    fake.messages.find(
      (m) => m.metadata?.event_type === 'cairn_approval_request' && m.metadata.event_payload?.run_id === run.id
    )
  )
  t.match(request, { channel: 'C0RUN', thread_ts: pair.mention.ts, text: 'Approval needed: shell' })
  const approve = (request.blocks ?? [])
    .filter((b) => b.type === 'actions')
    .flatMap((b) => b.elements as Array<{ action_id: string; value: string }>)
    .find((e) => e.action_id === 'cairn_approve')!
  t.ok(approve, 'an Approve button')

  const clicked = await click(app, slack, approve.value, { user: 'UAPPROVER' })
  t.equal(clicked.statusCode, 200)
  const answer = await waitFor('the answer in the thread', async () =>
    fake.messages.find((m) => m.thread_ts === pair.mention.ts && m.text === 'Done: the command ran once.')
  )
  t.equal(answer.channel, 'C0RUN')
  const [row] = rowsOf<{ status: string; output: string }>(
    await app.db.execute(sql`select status, output from runs where id = ${run.id}`)
  )
  t.match(row, { status: 'succeeded', output: 'Done: the command ran once.' })
  const [approval] = rowsOf<{ status: string; decided_by: string }>(
    await app.db.execute(sql`select status, decided_by from tool_approvals where id = ${approve.value}`)
  )
  t.match(approval, { status: 'approved', decided_by: 'slack:UAPPROVER' })
  const results = rowsOf<{ data: unknown }>(
    await app.db.execute(sql`select data from run_events where run_id = ${run.id} and type = 'tool.result'`)
  )
  t.equal(results.length, 1)
  t.match(JSON.stringify(results[0]!.data), /executions: 1/)
  t.equal(model.requests.length, 2, 'the model was asked twice: the call, then with its result')
  t.equal(
    fake.messages.filter((m) => m.metadata?.event_type === 'cairn_approval_request').length,
    1,
    'one approval message'
  )
})
