import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { FinishAbandoned, FinishBatcher } from '../../src/runs/finish-batcher.js'
import { claimRuns, finishAll, type RunEnd } from '../../src/runs/runs-repo.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'
import { storedEventsOf } from './run-helpers.js'

// A worker fills its free slots with one claim statement and ends the runs that finish
// together with one statement. Nothing executes here (RUN_WORKER_CONCURRENCY=0): the test
// claims and ends runs itself, as an instance would.

const QUIET = { RUN_WORKER_CONCURRENCY: '0', RUN_SWEEP_MS: '600000', RUN_POLL_MS: '600000' }
const claim = (app: { db: Parameters<typeof claimRuns>[0] }, limit: number, instanceId = 'test-worker') =>
  claimRuns(app.db, { instanceId, leaseMs: 60_000, budgetBytes: 100_000, limit })

async function setUp(t: Parameters<typeof buildTestApp>[0]) {
  const app = await buildTestApp(t, { env: QUIET })
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  const start = async (cookie: string, prompt: string, rootRunId?: string) => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie },
      payload: { prompt, engine: 'echo', ...(rootRunId ? { rootRunId } : {}) }
    })
    if (res.statusCode !== 201) throw new Error(`POST /api/runs: ${res.statusCode} ${res.body}`)
    return res.json().run.id as string
  }
  return { app, a, b, start }
}

t.test('one statement claims several runs, in turns between the orgs, one turn of a thread at a time', async (t) => {
  const { app, a, b, start } = await setUp(t)
  const flood: string[] = []
  for (let i = 0; i < 6; i++) flood.push(await start(a.cookie, `flood ${i}`))
  const late = [await start(b.cookie, 'b one'), await start(b.cookie, 'b two')]

  const seen: string[] = []
  const stop = app.testDb.database.onStatement((q) => {
    if (q.includes('queued_orgs')) seen.push(q)
  })
  const first = await claim(app, 4)
  stop()
  t.equal(seen.length, 1, 'one statement')
  t.same(
    first.claimed.map((c) => c.run.id).sort(),
    [flood[0], flood[1], late[0], late[1]].sort(),
    'two of each org: the flood does not take the slots the other org could have'
  )
  t.ok(first.waiting, 'more of the flood waits')
  t.ok(
    first.claimed.every((c) => c.run.status === 'running' && c.run.leaseOwner === 'test-worker'),
    'each leased to the claimer'
  )

  const second = await claim(app, 3)
  t.same(
    second.claimed.map((c) => c.run.id),
    flood.slice(2, 5),
    'the only org with queued runs: first in, first out'
  )
  t.equal((await claim(app, 3, 'another-instance')).claimed.length, 1, 'another instance takes what is left')
  t.same(await claim(app, 3), { claimed: [], waiting: false }, 'an empty queue')

  for (const id of [...flood, ...late]) {
    const org = late.includes(id) ? b.org.id : a.org.id
    const started = (await storedEventsOf(app, org, id)).filter((e) => e.type === 'run.started')
    t.equal(started.length, 1, `one run.started for ${id}`)
  }

  const root = await start(b.cookie, 'a thread')
  const next = await start(b.cookie, 'its next turn', root)
  const thread = await claim(app, 4)
  t.same(
    thread.claimed.map((c) => c.run.id),
    [root],
    'a thread runs one turn at a time: its next turn is not claimed with it'
  )
  t.ok(thread.waiting, 'the next turn waits')
  t.ok(next)
})

const endOf = (run: RunEnd['run'], outcome: RunEnd['outcome'], text: string): RunEnd => ({
  run,
  outcome,
  usage: { promptTokens: 3, completionTokens: 5 },
  transcript: {
    messages: [
      { role: 'user', content: text },
      { role: 'assistant', content: `answer to ${text}` }
    ],
    from: 0
  },
  events: [
    { orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, type: 'message.completed', data: { text } },
    { orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, type: `run.${outcome.status}`, data: {} }
  ]
})

t.test('one statement ends several runs of two orgs, each exactly once and only by its holder', async (t) => {
  const { app, a, b, start } = await setUp(t)
  await start(a.cookie, 'first')
  await start(b.cookie, 'second')
  await start(a.cookie, 'third')
  const held = (await claim(app, 3)).claimed.map((c) => c.run)
  t.equal(held.length, 3)
  await start(b.cookie, 'held elsewhere')
  const elsewhere = (await claim(app, 1, 'another-instance')).claimed[0]!.run

  const ends = [
    endOf(held[0]!, { status: 'succeeded', facts: [], output: 'answer to first' }, 'first'),
    endOf(held[1]!, { status: 'failed', error: 'it broke' }, 'second'),
    endOf(held[2]!, { status: 'cancelled' }, 'third'),
    endOf(elsewhere, { status: 'succeeded', facts: [], output: 'not ours' }, 'elsewhere')
  ]
  const seen: string[] = []
  const stop = app.testDb.database.onStatement((q) => {
    if (q.includes('with fin as')) seen.push(q)
  })
  t.same(await finishAll(app.db, 'test-worker', ends), [true, true, true, false], "each end answered; not another's")
  stop()
  t.equal(seen.length, 1, 'one statement')

  const rows = rowsOf<{
    id: string
    status: string
    error: string | null
    output: string | null
    lease_owner: unknown
  }>(
    await app.db.execute(
      sql`select id, status, error, output, lease_owner from runs where id in (${sql.join(
        [...held, elsewhere].map((r) => sql`${r.id}`),
        sql`, `
      )})`
    )
  )
  const byId = new Map(rows.map((r) => [r.id, r]))
  t.match(byId.get(held[0]!.id), { status: 'succeeded', output: 'answer to first', error: null, lease_owner: null })
  t.match(byId.get(held[1]!.id), { status: 'failed', error: 'it broke', output: null, lease_owner: null })
  t.match(byId.get(held[2]!.id), { status: 'cancelled', output: null, lease_owner: null })
  t.match(byId.get(elsewhere.id), { status: 'running', lease_owner: 'another-instance' }, 'left to its holder')

  for (const [i, run] of held.entries()) {
    const types = (await storedEventsOf(app, run.orgId, run.id)).map((e) => e.type)
    t.same(types.slice(-2), ['message.completed', ends[i]!.events[1]!.type], `${run.id}: its last events, in order`)
    const messages = rowsOf<{ n: number }>(
      await app.db.execute(sql`select count(*)::int as n from run_messages where run_id = ${run.id}`)
    )[0]!
    t.equal(messages.n, 2, 'its transcript stored')
  }
  t.same(
    (await storedEventsOf(app, elsewhere.orgId, elsewhere.id)).map((e) => e.type),
    ['run.queued', 'run.started'],
    'nothing stored for the run held elsewhere'
  )

  // sent again (an answer lost on the way): nothing is ended twice
  t.same(await finishAll(app.db, 'test-worker', ends.slice(0, 3)), [false, false, false])
  for (const run of held) {
    const terminal = (await storedEventsOf(app, run.orgId, run.id)).filter((e) =>
      ['run.succeeded', 'run.failed', 'run.cancelled'].includes(e.type)
    )
    t.equal(terminal.length, 1, `${run.id} ended once`)
  }
})

t.test('an instance killed with ends waiting loses no run: what was sent is ended, the rest swept', async (t) => {
  const { app, a, start } = await setUp(t)
  for (let i = 0; i < 4; i++) await start(a.cookie, `run ${i}`)
  const held = (await claim(app, 4)).claimed.map((c) => c.run)
  t.equal(held.length, 4)
  const batcher = new FinishBatcher(app.db, 'test-worker')
  // the first end is sent at once; the others wait for it, and the instance dies meanwhile
  const answers = held.map((run, i) =>
    batcher.finish(endOf(run, { status: 'succeeded', facts: [], output: `answer ${i}` }, `run ${i}`)).then(
      (finished) => ({ finished }),
      (err: unknown) => ({ abandoned: err instanceof FinishAbandoned })
    )
  )
  batcher.kill()
  t.same(await Promise.all(answers), [
    { finished: true },
    { abandoned: true },
    { abandoned: true },
    { abandoned: true }
  ])
  await t.rejects(
    batcher.finish(endOf(held[1]!, { status: 'cancelled' }, 'late')),
    { name: 'FinishAbandoned' },
    'nothing more'
  )

  // the abandoned runs' leases expire: the sweeper fails them
  await app.db.execute(
    sql`update runs set lease_expires_at = now() - interval '1 second' where status = 'running' and lease_owner = 'test-worker'`
  )
  t.equal(await app.runs.sweeper.sweep(), 3)
  for (const [i, run] of held.entries()) {
    const events = await storedEventsOf(app, a.org.id, run.id)
    const terminal = events.filter((e) => ['run.succeeded', 'run.failed', 'run.cancelled'].includes(e.type))
    t.same(
      terminal.map((e) => [e.type, e.data]),
      i === 0 ? [['run.succeeded', {}]] : [['run.failed', { error: 'worker_lost' }]],
      `${run.id}: one end`
    )
  }
})
