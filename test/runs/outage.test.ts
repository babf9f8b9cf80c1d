import { inArray } from 'drizzle-orm'
import t from 'tap'
import { runEvents, runs } from '../../src/runs/tables.js'
import { buildTestApp, createTestDatabase, waitFor } from '../helper.js'
import { databaseOutage } from '../db/outage.js'

/**
 * A database outage shorter than a run's lease fails no run. The
 * runs' event writes fail while it lasts (and on Postgres the statements in flight are
 * cut); each run waits for the database, goes on, and finishes exactly once.
 */

const OUTAGE_MS = 1500
const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ')

t.test('a database outage shorter than the lease fails no running run; each finishes once, whole', async (t) => {
  const shared = await createTestDatabase(t)
  const app = await buildTestApp(t, {
    db: shared,
    env: {
      ECHO_WORD_DELAY_MS: '40',
      RUN_WORKER_CONCURRENCY: '6',
      RUN_POLL_MS: '50',
      RUN_SWEEP_MS: '200',
      RUN_LEASE_MS: '8000'
    }
  })
  const outage = databaseOutage(t, shared.database, shared.url)
  const prompts = Array.from({ length: 6 }, (_, i) => words(80, `r${i}w`))
  const ids: string[] = []
  for (const prompt of prompts) {
    const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt } })
    t.equal(res.statusCode, 201)
    ids.push(res.json().run.id)
  }
  // every run is streaming its words when the database goes away
  await waitFor('all six streaming', async () => {
    const deltas = await app.db.select({ runId: runEvents.runId }).from(runEvents).where(inArray(runEvents.runId, ids))
    const streaming = new Set(deltas.map((d) => d.runId))
    return streaming.size === ids.length && deltas.length >= ids.length * 4
  })

  await outage.begin()
  await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS))
  outage.end()

  const finished = await waitFor(
    'all six finished',
    async () => {
      const rows = await app.db.select().from(runs).where(inArray(runs.id, ids))
      return rows.every((r) => ['succeeded', 'failed', 'cancelled'].includes(r.status)) ? rows : null
    },
    60_000
  )
  t.same(
    finished.map((r) => [r.status, r.error]),
    ids.map(() => ['succeeded', null]),
    'none failed'
  )
  for (const run of finished) t.equal(run.output, prompts[ids.indexOf(run.id)], 'the whole answer')
  const events = await app.db
    .select({ runId: runEvents.runId, type: runEvents.type })
    .from(runEvents)
    .where(inArray(runEvents.runId, ids))
  for (const id of ids) {
    const ends = events.filter(
      (e) => e.runId === id && e.type.startsWith('run.') && !['run.queued', 'run.started'].includes(e.type)
    )
    t.same(
      ends.map((e) => e.type),
      ['run.succeeded'],
      `run ${id} finished once`
    )
    t.equal(
      events.filter((e) => e.runId === id && e.type === 'run.started').length,
      1,
      'went on where it was, not started over'
    )
  }
})

t.test(
  'an outage longer than the lease: the worker stops writing and frees its slot, the sweeper fails the run once (worker_lost)',
  async (t) => {
    const shared = await createTestDatabase(t)
    const app = await buildTestApp(t, {
      db: shared,
      env: {
        ECHO_WORD_DELAY_MS: '40',
        RUN_WORKER_CONCURRENCY: '2',
        RUN_POLL_MS: '50',
        RUN_SWEEP_MS: '100',
        RUN_LEASE_MS: '1500'
      }
    })
    const outage = databaseOutage(t, shared.database, shared.url)
    const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: words(400, 'long') } })
    t.equal(res.statusCode, 201)
    const id = res.json().run.id as string
    await waitFor('the run streaming', async () => {
      const deltas = await app.db
        .select({ id: runEvents.id })
        .from(runEvents)
        .where(inArray(runEvents.runId, [id]))
      return deltas.length >= 4
    })

    await outage.begin()
    // its writes are retried while the lease can hold; then the worker lets the run go (no fixed wait: the lease is
    // the test's clock)
    await waitFor('the worker let the run go', async () => app.runs.worker.activeCount === 0, 30_000)
    outage.end()

    const [failed] = await waitFor(
      'the run ended',
      async () => {
        const rows = await app.db
          .select()
          .from(runs)
          .where(inArray(runs.id, [id]))
        return rows[0] && ['succeeded', 'failed', 'cancelled'].includes(rows[0].status) ? rows : null
      },
      30_000
    )
    t.match(failed, { status: 'failed', error: 'worker_lost' }, 'the sweeper answers for it')
    const events = await app.db
      .select({ id: runEvents.id, type: runEvents.type })
      .from(runEvents)
      .where(inArray(runEvents.runId, [id]))
    const ends = events.filter((e) => ['run.succeeded', 'run.failed', 'run.cancelled'].includes(e.type))
    t.same(
      ends.map((e) => e.type),
      ['run.failed'],
      'ended once, by the sweeper'
    )
    const last = events.reduce((a, b) => (Number(b.id) > Number(a.id) ? b : a))
    t.equal(last.type, 'run.failed', 'nothing of the run written after its end')
    // the slot is free: the worker takes the next run
    const next = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'after the outage' } })
    await waitFor(
      'the next run succeeded',
      async () =>
        (
          await app.db
            .select()
            .from(runs)
            .where(inArray(runs.id, [next.json().run.id]))
        )[0]?.status === 'succeeded',
      30_000
    )
  }
)
