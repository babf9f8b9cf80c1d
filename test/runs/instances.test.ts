import { eq, sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { runEvents } from '../../src/runs/tables.js'
import { createTestDatabase, secondHandle } from '../helper.js'
import { buildRunsApp } from './group.js'
import { eventually, SseClient } from './sse-client.js'

/**
 * Two app instances on one database. On real Postgres (DATABASE_URL) each instance opens
 * its own pool and its own LISTEN connection, as two processes would; on PGlite they
 * share the one embedded database object.
 */
async function twoInstances(t: import('tap').Test, envA: Record<string, string>, envB: Record<string, string>) {
  const shared = await createTestDatabase(t)
  const second = await secondHandle(t, shared)
  // B is torn down first (teardowns run in reverse), its pool closes after it
  const a = await buildRunsApp(t, { db: shared, env: envA })
  const b = await buildRunsApp(t, { db: second, env: envB })
  await b.listen({ port: 0, host: '127.0.0.1' })
  return { a, b, baseB: `http://127.0.0.1:${(b.server.address() as { port: number }).port}` }
}

// A lease long enough that a loaded CI machine (two cores, two test files at once) never
// loses one to a late renewal; only the kill test waits for a lease to expire, with its own.
const fast = { RUN_POLL_MS: '50', RUN_SWEEP_MS: '100', RUN_LEASE_MS: '6000' }
const expiring = { ...fast, RUN_LEASE_MS: '2000' }

t.test('a run created on A runs once; B streams its change and events; a cancel on B stops it on A', async (t) => {
  const { a, b, baseB } = await twoInstances(
    t,
    { ...fast, ECHO_WORD_DELAY_MS: '100' },
    { ...fast, RUN_WORKER_CONCURRENCY: '0' }
  )
  const changes = await SseClient.open(`${baseB}/api/runs/changes`)
  t.teardown(() => changes.close())

  const quick = (await a.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'one two three' } })).json().run
  const events = await SseClient.open(`${baseB}/api/runs/${quick.id}/events`)
  await events.until((c) => c.ended, 20_000)
  const lifecycle = events.frames.filter((f) => f.event.startsWith('run.')).map((f) => `${f.event} ${f.data}`)
  t.same(
    lifecycle.map((l) => l.split(' ')[0]),
    ['run.queued', 'run.started', 'run.succeeded'],
    `executed once: ${lifecycle.join(' | ')}`
  )
  t.equal(events.frames.at(-1)!.event, 'end')
  await changes.until((c) => c.events('change').some((f) => c.json(f).id === quick.id))
  t.same(changes.json(changes.events('change')[0]!), { kind: 'run', id: quick.id, rootRunId: quick.id })
  const started = await a.db.select().from(runEvents).where(eq(runEvents.type, 'run.started'))
  t.equal(started.length, 1, 'one start in the database')

  const slow = (
    await a.inject({
      method: 'POST',
      url: '/api/runs',
      payload: { prompt: Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ') }
    })
  ).json().run
  await eventually(
    async () => (await b.inject({ method: 'GET', url: `/api/runs/${slow.id}` })).json().run.status === 'running'
  )
  // the claim commits before A reads its answer: B may see 'running' a moment before A counts the run
  t.ok(await eventually(async () => a.runs.worker.activeCount === 1, 5000), 'A runs it')
  const stream = await SseClient.open(`${baseB}/api/runs/${slow.id}/events`)
  t.teardown(() => stream.close())
  await stream.until((c) => c.events('message.delta').length >= 2)
  const cancel = await b.inject({ method: 'POST', url: `/api/runs/${slow.id}/cancel` })
  t.equal(cancel.statusCode, 200)
  await stream.until((c) => c.ended, 10_000)
  t.same(
    stream.frames.slice(-2).map((f) => f.event),
    ['run.cancelled', 'end'],
    `ends cancelled: ${JSON.stringify(stream.frames.slice(-2))}`
  )
  t.ok(stream.events('message.delta').length < 50, 'stopped well before the end')
  const final = (await b.inject({ method: 'GET', url: `/api/runs/${slow.id}` })).json().run
  t.equal(final.status, 'cancelled')
})

t.test('a killed worker leaves its run failed with worker_lost', async (t) => {
  const { a, b, baseB } = await twoInstances(
    t,
    { ...expiring, ECHO_WORD_DELAY_MS: '100' },
    { ...expiring, RUN_WORKER_CONCURRENCY: '0' }
  )
  const run = (
    await a.inject({
      method: 'POST',
      url: '/api/runs',
      payload: { prompt: Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ') }
    })
  ).json().run
  const stream = await SseClient.open(`${baseB}/api/runs/${run.id}/events`)
  t.teardown(() => stream.close())
  await stream.until((c) => c.events('message.delta').length >= 2)
  // crash: no draining, no release; the lease is left to expire
  a.runs.kill()
  await a.close()
  await stream.until((c) => c.ended, 15_000)
  const failed = stream.events('run.failed')
  t.equal(failed.length, 1)
  t.same(stream.json(failed[0]!).data, { error: 'worker_lost' })
  const final = (await b.inject({ method: 'GET', url: `/api/runs/${run.id}` })).json().run
  t.match(final, { status: 'failed', error: 'worker_lost' })
  t.ok(final.finishedAt)
})

t.test('graceful close hands the running run back at once; another instance finishes it once', async (t) => {
  const { a, b, baseB } = await twoInstances(
    t,
    { ...fast, ECHO_WORD_DELAY_MS: '200' },
    { ...fast, RUN_WORKER_CONCURRENCY: '0' }
  )
  const run = (
    await a.inject({
      method: 'POST',
      url: '/api/runs',
      payload: { prompt: Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ') }
    })
  ).json().run
  const stream = await SseClient.open(`${baseB}/api/runs/${run.id}/events`)
  t.teardown(() => stream.close())
  await stream.until((c) => c.events('message.delta').length >= 1)
  // 100 words of 200 ms: closing waits for none of them
  const started = Date.now()
  await a.close()
  t.ok(Date.now() - started < 5000, `closed without running the run out (${Date.now() - started} ms)`)
  const [row] = rowsOf<{ status: string; lease_owner: string | null; started_at: unknown }>(
    await b.db.execute(sql`select status, lease_owner, started_at from runs where id = ${run.id}`)
  )
  t.same(row, { status: 'queued', lease_owner: null, started_at: null }, 'queued again, its lease released')
  await stream.until((c) => c.events('run.queued').length === 2)
  t.same(stream.json(stream.events('run.queued')[1]!).data, { engine: 'echo', model: 'echo', requeued: true })

  // an instance with workers takes it over and finishes it once
  const c = await buildRunsApp(t, {
    db: { database: b.testDb.database, url: b.testDb.url },
    env: { ...fast, ECHO_WORD_DELAY_MS: '0' }
  })
  await stream.until((s) => s.ended, 20_000)
  t.same(
    stream
      .events()
      .filter((f) => f.event.startsWith('run.'))
      .map((f) => f.event),
    ['run.queued', 'run.started', 'run.queued', 'run.started', 'run.succeeded']
  )
  t.equal((await c.inject({ method: 'GET', url: `/api/runs/${run.id}` })).json().run.status, 'succeeded')
})

t.test('idempotent dispatch racing on two instances creates one run', async (t) => {
  const { a, b, baseB } = await twoInstances(t, { RUN_WORKER_CONCURRENCY: '0' }, { RUN_WORKER_CONCURRENCY: '0' })
  await a.listen({ port: 0, host: '127.0.0.1' })
  const baseA = `http://127.0.0.1:${(a.server.address() as { port: number }).port}`
  const answers = await Promise.all(
    Array.from({ length: 20 }, (_, i) =>
      fetch(`${i % 2 ? baseA : baseB}/api/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'two-instances' },
        body: JSON.stringify({ prompt: 'once' })
      }).then(async (r) => ({ status: r.status, body: await r.text() }))
    )
  )
  t.same(
    answers.filter((x) => x.status !== 201 && x.status !== 409),
    [],
    'only 201 or 409 in_use'
  )
  t.equal(new Set(answers.filter((x) => x.status === 201).map((x) => x.body)).size, 1)
  const [row] = rowsOf<{ n: number }>(await b.db.execute(sql`select count(*)::int as n from runs`))
  t.equal(row!.n, 1, 'exactly one run')
})
