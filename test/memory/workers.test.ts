import { eq, sql } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { rowsOf } from '../../src/db/client.js'
import { memoryCaptures, memoryItemHistory, memoryItems } from '../../src/memory/tables.js'
import { buildTestApp, createTestDatabase, secondHandle } from '../helper.js'
import { FAST, runRef, startMem0, waitFor } from './helpers.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

async function enqueueMany(app: App, n: number) {
  const runs = []
  for (let i = 0; i < n; i++) {
    const run = runRef(DEV_ORG.id)
    await app.db.transaction(async (tx) =>
      app.memory.forRuns.enqueueCapture(tx, run, [`Remember fact ${i} alpha`, `Remember fact ${i} beta`])
    )
    runs.push(run)
  }
  return runs
}

async function countByState(app: App) {
  const rows = rowsOf<{ state: string; n: number }>(
    await app.db.execute(sql`select state, count(*)::int as n from memory_captures group by state`)
  )
  return Object.fromEntries(rows.map((r) => [r.state, r.n]))
}

t.test(
  'a worker killed mid-delivery leaves an orphan after the lease; nothing is delivered twice; resolve once',
  async (t) => {
    const mem0 = await startMem0(t)
    const db = await createTestDatabase(t)
    const env = {
      ...FAST,
      MEMORY_BACKEND: 'http',
      MEMORY_URL: mem0.url,
      MEMORY_HTTP_TIMEOUT_MS: '30000',
      MEMORY_CAPTURE_LEASE_MS: '300'
    }
    const crashed = await buildTestApp(t, { db, env })
    mem0.state.mode = 'hang'
    const run = runRef(DEV_ORG.id)
    await crashed.db.transaction(async (tx) => crashed.memory.forRuns.enqueueCapture(tx, run, ['Remember the crash']))
    await waitFor('the delivery in flight', async () => mem0.state.posts === 1)
    crashed.memory.worker!.kill()

    // a second instance on the same database keeps working while the pool is healthy again
    mem0.state.mode = 'ok'
    const survivor = await buildTestApp(t, { db: await secondHandle(t, db), env })
    const list = async () => (await survivor.inject({ method: 'GET', url: '/api/memory/captures' })).json().captures
    const orphan = await waitFor('the orphan', async () =>
      (await list()).find((c: { orphan?: boolean }) => c.orphan === true)
    )
    t.match(orphan, { runId: run.id, state: 'delivering', attempts: 1, orphan: true })
    // drive rounds by hand too: the orphan is never claimed
    t.equal(await survivor.memory.worker!.runOnce(), 0)
    t.equal(await crashed.memory.worker!.runOnce(), 0)
    mem0.releaseHanging()
    t.equal(mem0.state.posts, 1, 'the service sent the capture once and never again')
    t.equal(mem0.deliveries.size, 0)

    const [a, b] = await Promise.all(
      ['delivered', 'discard'].map((resolution) =>
        survivor.inject({ method: 'POST', url: `/api/memory/captures/${run.id}/resolve`, payload: { resolution } })
      )
    )
    t.same([a!.statusCode, b!.statusCode].sort(), [200, 404], 'two concurrent resolves: exactly one wins')
    const loser = a!.statusCode === 404 ? a! : b!
    t.equal(loser.json().error, 'no delivering orphan for this run in your org')
    const third = await survivor.inject({
      method: 'POST',
      url: `/api/memory/captures/${run.id}/resolve`,
      payload: { resolution: 'delivered' }
    })
    t.equal(third.statusCode, 404)
    const [row] = await survivor.db.select().from(memoryCaptures).where(eq(memoryCaptures.runId, run.id))
    t.ok(row!.state === 'delivered' || row!.state === 'discarded')
  }
)

t.test('a stale worker finishing late changes nothing', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  const run = runRef(DEV_ORG.id)
  await app.db.transaction(async (tx) => app.memory.forRuns.enqueueCapture(tx, run, ['Remember the stale worker']))
  // the row was claimed by a worker, orphaned and resolved by hand meanwhile: attempt 1 is over
  await app.db.execute(
    sql`update memory_captures set state = 'delivering', attempts = 1, lease_expires_at = now() - interval '1 second'`
  )
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: `/api/memory/captures/${run.id}/resolve`,
        payload: { resolution: 'discard' }
      })
    ).statusCode,
    200
  )
  const { createPostgresPool } = await import('../../src/memory/postgres-pool.js')
  const { ensurePool } = await import('../../src/memory/pools.js')
  const pool = await ensurePool(app.db, DEV_ORG.id, 'org', '')
  const [row] = await app.db.select().from(memoryCaptures)
  // the late worker's conditional update (state delivering, attempt 1) matches nothing: its facts roll back
  await createPostgresPool(app.db).deliver(
    pool,
    { captureId: row!.id, runId: run.id, rootRunId: run.id, facts: ['Remember the stale worker'] },
    async (exec) => {
      const res = await exec.execute(
        sql`update memory_captures set state = 'delivered' where id = ${row!.id} and state = 'delivering' and attempts = 1 returning id`
      )
      return rowsOf(res).length === 1
    }
  )
  t.equal((await app.db.select().from(memoryCaptures))[0]!.state, 'discarded')
  t.equal((await app.db.select().from(memoryItems)).length, 0, 'nothing kept')
})

t.test('two delivery workers on one database deliver every capture exactly once (http pool)', async (t) => {
  const mem0 = await startMem0(t)
  const db = await createTestDatabase(t)
  const env = {
    ...FAST,
    MEMORY_BACKEND: 'http',
    MEMORY_URL: mem0.url,
    MEMORY_CAPTURE_BATCH: '3',
    MEMORY_CAPTURE_CONCURRENCY: '2'
  }
  const one = await buildTestApp(t, { db, env })
  const two = await buildTestApp(t, { db: await secondHandle(t, db), env })
  const runs = await enqueueMany(one, 40)
  await waitFor('every delivery', async () => (await countByState(one)).delivered === 40, 30_000)
  t.same(await countByState(two), { delivered: 40 })
  t.equal(mem0.deliveries.size, 40)
  t.ok(
    [...mem0.deliveries.values()].every((n) => n === 1),
    'each capture reached the pool once'
  )
  t.equal(mem0.state.posts, 40)
  t.equal(mem0.store.size, 80)
  t.equal(runs.length, 40)
})

t.test('two delivery workers on one database deliver every capture exactly once (postgres pool)', async (t) => {
  const db = await createTestDatabase(t)
  const env = { ...FAST, MEMORY_CAPTURE_BATCH: '3', MEMORY_CAPTURE_CONCURRENCY: '2' }
  const one = await buildTestApp(t, { db, env })
  const two = await buildTestApp(t, { db: await secondHandle(t, db), env })
  await enqueueMany(one, 40)
  await waitFor('every delivery', async () => (await countByState(two)).delivered === 40, 30_000)
  t.equal((await one.db.select().from(memoryItems)).length, 80)
  t.equal((await one.db.select().from(memoryItemHistory)).length, 80, 'one created entry per fact: no double write')
  const attempts = rowsOf<{ max: number }>(
    await one.db.execute(sql`select max(attempts)::int as max from memory_captures`)
  )
  t.equal(attempts[0]!.max, 1, 'no capture was claimed twice')
})

t.test('a batched delivery writes only the captures it still owns', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  const { createPostgresPool } = await import('../../src/memory/postgres-pool.js')
  const { ensurePool } = await import('../../src/memory/pools.js')
  const pool = await ensurePool(app.db, DEV_ORG.id, 'org', '')
  const entries = ['one', 'two', 'three'].map((name) => ({
    pool,
    capture: {
      captureId: `capture-${name}`,
      runId: `run-${name}`,
      rootRunId: `run-${name}`,
      facts: [`Remember batch fact ${name}`]
    }
  }))
  const owned = await createPostgresPool(app.db).deliverBatch!(
    entries,
    async () => new Set(['capture-one', 'capture-three'])
  )
  t.same([...owned].sort(), ['capture-one', 'capture-three'])
  const items = await app.db.select().from(memoryItems)
  t.same(
    items.map((i) => i.content).sort(),
    ['Remember batch fact one', 'Remember batch fact three'],
    'the stale capture wrote nothing'
  )
  t.equal((await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().total, 2)
})

t.test('closing the app lets the delivery in flight finish (drain) before the database closes', async (t) => {
  const mem0 = await startMem0(t)
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_BACKEND: 'http', MEMORY_URL: mem0.url } })
  mem0.state.delayMs = 300
  const run = runRef(DEV_ORG.id)
  await app.db.transaction(async (tx) => app.memory.forRuns.enqueueCapture(tx, run, ['Remember to drain']))
  await waitFor('the delivery in flight', async () => mem0.state.posts === 1)
  await app.close()
  const [row] = await app.testDb.database.db.select().from(memoryCaptures)
  t.equal(row!.state, 'delivered', 'close waited for the delivery and recorded it')
  t.equal(mem0.state.posts, 1)
})
