import { eq, sql } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newId } from '../../src/db/ids.js'
import { backoffDelay } from '../../src/worker-loop.js'
import { memoryCaptures, memoryItemHistory, memoryItems } from '../../src/memory/tables.js'
import { runEvents } from '../../src/runs/tables.js'
import { buildTestApp } from '../helper.js'
import { FAST, runRef, startMem0, waitFor } from './helpers.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

async function enqueue(app: App, facts: string[], orgId: string = DEV_ORG.id) {
  const run = runRef(orgId)
  await app.db.transaction(async (tx) => app.memory.forRuns.enqueueCapture(tx, run, facts))
  return run
}

async function captureOf(app: App, runId: string) {
  const list = (await app.inject({ method: 'GET', url: '/api/memory/captures' })).json().captures as Array<
    Record<string, unknown>
  >
  return list.find((c) => c.runId === runId)
}

/** Makes every pending capture due now, so a test need not wait out a backoff. */
async function makeDue(app: App) {
  await app.db.execute(sql`update memory_captures set next_attempt_at = now() where state = 'pending'`)
}

t.test('the capture row is written with the run transaction: rollback leaves none, commit leaves one', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  const rolledBack = runRef(DEV_ORG.id)
  await t.rejects(
    app.db.transaction(async (tx) => {
      await app.memory.forRuns.enqueueCapture(tx, rolledBack, ['Remember the rollback'])
      throw new Error('the run failed to finish')
    })
  )
  t.equal((await app.db.select().from(memoryCaptures)).length, 0, 'rolled back: no capture row')

  const run = await enqueue(app, ['  Remember the blue door  ', '', 'Remember to water plants'])
  await app.db.transaction(async (tx) => app.memory.forRuns.enqueueCapture(tx, run, ['a second call']))
  const rows = await app.db.select().from(memoryCaptures)
  t.equal(rows.length, 1, 'one row per run')
  const list = (await app.inject({ method: 'GET', url: '/api/memory/captures' })).json()
  t.equal(list.captures.length, 1)
  const capture = list.captures[0]
  t.same(Object.keys(capture).sort(), [
    'addedCount',
    'attempts',
    'createdAt',
    'deliveredAt',
    'itemCount',
    'lastError',
    'maxAttempts',
    'mergedCount',
    'nextAttemptAt',
    'rootRunId',
    'runId',
    'state',
    'updatedAt'
  ])
  t.match(capture, {
    runId: run.id,
    rootRunId: run.rootRunId,
    state: 'pending',
    attempts: 0,
    maxAttempts: 8,
    lastError: null,
    itemCount: 2,
    addedCount: null,
    mergedCount: null,
    deliveredAt: null
  })
  t.same(rows[0]!.facts, ['Remember the blue door', 'Remember to water plants'])

  await enqueue(app, ['   ', ''])
  t.equal((await app.db.select().from(memoryCaptures)).length, 1, 'no facts: no row')
  await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: false } })
  await enqueue(app, ['Remember while off'])
  t.equal((await app.db.select().from(memoryCaptures)).length, 1, 'memory off for the org: no row')
})

t.test('pending → delivering → delivered through the worker that starts with the app (http pool)', async (t) => {
  const mem0 = await startMem0(t)
  const events: Array<{ orgId: string; runId: string; type: string; data: Record<string, unknown> }> = []
  const app = await buildTestApp(t, {
    env: { ...FAST, MEMORY_BACKEND: 'http', MEMORY_URL: mem0.url },
    runEvents: {
      async emit(e) {
        events.push(e)
      }
    }
  })
  const run = await enqueue(app, ['Remember the release train leaves Tuesday'])
  const capture = await waitFor('delivery', async () => {
    const c = await captureOf(app, run.id)
    return c?.state === 'delivered' && c
  })
  t.match(capture, { state: 'delivered', attempts: 1, lastError: null, itemCount: 1 })
  t.ok(Date.parse(capture.deliveredAt as string))
  const [row] = await app.db.select().from(memoryCaptures)
  t.equal(mem0.deliveries.get(row!.id), 1, 'delivered once, carrying its capture id')
  const stored = [...mem0.store.values()]
  t.equal(stored.length, 1)
  t.match(stored[0], {
    memory: 'Remember the release train leaves Tuesday',
    user_id: `cairn:${DEV_ORG.id}`,
    metadata: { capture_id: row!.id, run_id: run.id }
  })
  t.same(events, [
    {
      orgId: DEV_ORG.id,
      runId: run.id,
      type: 'memory.captured',
      data: { runId: run.id, rootRunId: run.rootRunId, itemCount: 1 }
    }
  ])
  const search = (await app.inject({ method: 'GET', url: '/api/memory/search?q=release' })).json()
  t.equal(search.items[0].content, 'Remember the release train leaves Tuesday', 'the http pool answers search')
  const history = (await app.inject({ method: 'GET', url: `/api/memory/item/${search.items[0].id}/history` })).json()
  t.match(history.history, [{ kind: 'created', changedBy: `run:${run.id}`, changedByName: 'a run' }])
})

t.test(
  '5xx: back to pending with growing backoff, then dead when attempts run out; retry gives a fresh budget',
  async (t) => {
    const mem0 = await startMem0(t)
    const app = await buildTestApp(t, {
      env: {
        ...FAST,
        MEMORY_BACKEND: 'http',
        MEMORY_URL: mem0.url,
        MEMORY_CAPTURE_WORKER: 'false',
        MEMORY_CAPTURE_ATTEMPTS: '4',
        MEMORY_CAPTURE_BACKOFF_MS: '1000',
        MEMORY_CAPTURE_BACKOFF_MAX_MS: '60000'
      }
    })
    const worker = app.memory.worker!
    mem0.state.mode = 'fail'
    const run = await enqueue(app, ['Remember the flaky pool'])
    const delays: number[] = []
    for (let attempt = 1; attempt <= 3; attempt++) {
      t.equal(await worker.runOnce(), 1, `attempt ${attempt} claimed`)
      const c = (await captureOf(app, run.id))!
      t.match(c, { state: 'pending', attempts: attempt, maxAttempts: 4, lastError: 'the memory service answered 503' })
      delays.push(Date.parse(c.nextAttemptAt as string) - Date.parse(c.updatedAt as string))
      t.equal(await worker.runOnce(), 0, 'not claimed again before its backoff')
      await makeDue(app)
    }
    t.ok(delays[0]! >= 500 && delays[0]! <= 1000, `first delay ${delays[0]} in [500, 1000]`)
    t.ok(delays[1]! >= 1000 && delays[1]! <= 2000, `second delay ${delays[1]} in [1000, 2000]`)
    t.ok(delays[2]! >= 2000 && delays[2]! <= 4000, `third delay ${delays[2]} in [2000, 4000]`)
    t.equal(await worker.runOnce(), 1)
    t.match(await captureOf(app, run.id), { state: 'dead', attempts: 4, lastError: 'the memory service answered 503' })
    t.equal(await worker.runOnce(), 0, 'a dead capture is never claimed')

    const wrongRun = await app.inject({ method: 'POST', url: `/api/memory/captures/${newId()}/retry` })
    t.equal(wrongRun.statusCode, 404)
    t.same(wrongRun.json(), {
      error: 'no dead capture for this run in your org',
      message: 'there is no dead capture for this run in your organization'
    })
    const retry = await app.inject({ method: 'POST', url: `/api/memory/captures/${run.id}/retry` })
    t.equal(retry.statusCode, 200)
    t.same(retry.json(), { ok: true })
    t.match(await captureOf(app, run.id), { state: 'pending', attempts: 0, maxAttempts: 4 })
    const twice = await app.inject({ method: 'POST', url: `/api/memory/captures/${run.id}/retry` })
    t.equal(twice.statusCode, 404, 'retry works once: the row is no longer dead')
    t.equal(twice.json().error, 'no dead capture for this run in your org')
    const resolvePending = await app.inject({
      method: 'POST',
      url: `/api/memory/captures/${run.id}/resolve`,
      payload: { resolution: 'delivered' }
    })
    t.equal(resolvePending.statusCode, 404, 'a pending row is not an orphan')
    t.same(resolvePending.json(), {
      error: 'no delivering orphan for this run in your org',
      message: 'there is no orphaned delivery for this run in your organization'
    })

    mem0.state.mode = 'ok'
    t.equal(await worker.runOnce(), 1)
    t.match(await captureOf(app, run.id), { state: 'delivered', attempts: 1 })
    t.equal(mem0.state.posts, 5, 'four failed attempts and one delivery')
  }
)

t.test('backoff doubles per attempt with jitter, capped', async (t) => {
  t.equal(
    backoffDelay(1, 1000, 60_000, () => 0),
    500
  )
  t.equal(
    backoffDelay(1, 1000, 60_000, () => 1),
    1000
  )
  t.equal(
    backoffDelay(4, 1000, 60_000, () => 0),
    4000
  )
  t.equal(
    backoffDelay(20, 1000, 60_000, () => 1),
    60_000
  )
})

for (const mode of ['reject', 'garbage'] as const) {
  t.test(`${mode === 'reject' ? 'a 4xx' : 'an unparseable'} answer sends the capture dead at once`, async (t) => {
    const mem0 = await startMem0(t)
    const app = await buildTestApp(t, {
      env: { ...FAST, MEMORY_BACKEND: 'http', MEMORY_URL: mem0.url, MEMORY_CAPTURE_WORKER: 'false' }
    })
    mem0.state.mode = mode
    const run = await enqueue(app, ['Remember the bad answer'])
    t.equal(await app.memory.worker!.runOnce(), 1)
    const c = (await captureOf(app, run.id))!
    t.match(c, { state: 'dead', attempts: 1, maxAttempts: 8 })
    t.match(c.lastError, mode === 'reject' ? /refused the capture \(422\)/ : /not a mem0 reply/)
    t.notOk('orphan' in c)
  })
}

t.test('a hanging pool: the delivery stays delivering and becomes an orphan; resolve works once', async (t) => {
  const mem0 = await startMem0(t)
  const app = await buildTestApp(t, {
    env: {
      ...FAST,
      MEMORY_BACKEND: 'http',
      MEMORY_URL: mem0.url,
      MEMORY_CAPTURE_WORKER: 'false',
      MEMORY_HTTP_TIMEOUT_MS: '100',
      MEMORY_CAPTURE_LEASE_MS: '60000'
    }
  })
  mem0.state.mode = 'hang'
  const delivered = await enqueue(app, ['Remember orphan one'])
  const discarded = await enqueue(app, ['Remember orphan two'])
  t.equal(await app.memory.worker!.runOnce(), 2)
  for (const run of [delivered, discarded]) {
    const c = (await captureOf(app, run.id))!
    t.match(c, { state: 'delivering', attempts: 1, lastError: /may have happened/ })
  }
  // a live lease (pinned in the future here, so the check does not race the clock) is not an orphan
  await app.db.execute(sql`update memory_captures set lease_expires_at = now() + interval '1 hour'`)
  t.notOk('orphan' in (await captureOf(app, delivered.id))!)
  const early = await app.inject({
    method: 'POST',
    url: `/api/memory/captures/${delivered.id}/resolve`,
    payload: { resolution: 'delivered' }
  })
  t.equal(early.statusCode, 404, 'a live lease is not an orphan yet')
  t.equal(early.json().error, 'no delivering orphan for this run in your org')
  await app.db.execute(sql`update memory_captures set lease_expires_at = now() + interval '200 milliseconds'`)
  await waitFor('orphans', async () => (await captureOf(app, discarded.id))?.orphan === true)
  t.match(await captureOf(app, delivered.id), { state: 'delivering', orphan: true })
  t.equal(await app.memory.worker!.runOnce(), 0, 'an orphan is never claimed again')

  const ok = await app.inject({
    method: 'POST',
    url: `/api/memory/captures/${delivered.id}/resolve`,
    payload: { resolution: 'delivered' }
  })
  t.equal(ok.statusCode, 200)
  t.same(ok.json(), { ok: true })
  const again = await app.inject({
    method: 'POST',
    url: `/api/memory/captures/${delivered.id}/resolve`,
    payload: { resolution: 'discard' }
  })
  t.equal(again.statusCode, 404)
  t.equal(again.json().error, 'no delivering orphan for this run in your org')
  const c1 = (await captureOf(app, delivered.id))!
  t.equal(c1.state, 'delivered')
  t.ok(Date.parse(c1.deliveredAt as string))
  t.notOk('orphan' in c1)

  const discard = await app.inject({
    method: 'POST',
    url: `/api/memory/captures/${discarded.id}/resolve`,
    payload: { resolution: 'discard' }
  })
  t.same(discard.json(), { ok: true })
  t.match(await captureOf(app, discarded.id), { state: 'discarded', deliveredAt: null })
  const retryOrphan = await app.inject({ method: 'POST', url: `/api/memory/captures/${discarded.id}/retry` })
  t.equal(retryOrphan.statusCode, 404, 'a discarded capture is not dead')
  t.equal(mem0.state.posts, 2, 'nothing was sent twice')
})

t.test("an orphan resolved as delivered tells the run's stream: memory.captured", async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false', RUN_WORKER_CONCURRENCY: '0' } })
  const created = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'remember things' } })
  const run = created.json().run as { id: string; rootRunId: string }
  const ref = { id: run.id, rootRunId: run.rootRunId, orgId: DEV_ORG.id, realUserId: null }
  await app.db.transaction(async (tx) => app.memory.forRuns.enqueueCapture(tx, ref, ['Remember one', 'Remember two']))
  // what a worker that died mid-delivery leaves behind
  await app.db.execute(
    sql`update memory_captures set state = 'delivering', lease_expires_at = now() - interval '1 second' where run_id = ${run.id}`
  )

  const ok = await app.inject({
    method: 'POST',
    url: `/api/memory/captures/${run.id}/resolve`,
    payload: { resolution: 'delivered' }
  })
  t.equal(ok.statusCode, 200)
  const events = await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id))
  const captured = events.filter((e) => e.type === 'memory.captured')
  t.equal(captured.length, 1, 'one memory.captured for the run')
  t.same(captured[0]!.data, { runId: run.id, rootRunId: run.rootRunId, itemCount: 2, resolved: true })
  const again = await app.inject({
    method: 'POST',
    url: `/api/memory/captures/${run.id}/resolve`,
    payload: { resolution: 'delivered' }
  })
  t.equal(again.statusCode, 404)
  t.equal(
    (await app.db.select().from(runEvents).where(eq(runEvents.type, 'memory.captured'))).length,
    1,
    'a refused resolve tells nobody'
  )
})

t.test(
  'postgres pool: facts land once; a fact already in the pool is not duplicated; a redelivery is dropped',
  async (t) => {
    const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
    const first = await enqueue(app, ['Remember: the VPN needs a token', 'Remember: the VPN needs a token'])
    const second = await enqueue(app, ['remember:   the vpn needs a TOKEN', 'Remember the printer is on floor 2'])
    t.equal(await app.memory.worker!.runOnce(), 2)
    for (const run of [first, second]) t.match(await captureOf(app, run.id), { state: 'delivered', attempts: 1 })
    const items = await app.db.select().from(memoryItems)
    t.equal(items.length, 2, 'the same fact, however spelled, is kept once')
    t.ok(items.some((i) => i.content === 'Remember the printer is on floor 2'))
    t.ok(items.some((i) => /^remember:\s+the vpn needs a token$/i.test(i.content)))
    const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json()
    t.equal(browse.total, 2, 'the pool count follows inserts')

    t.equal((await app.db.select().from(memoryItemHistory).where(eq(memoryItemHistory.kind, 'created'))).length, 2)

    // the same capture delivered again (a redelivery) adds nothing
    const [row] = await app.db.select().from(memoryCaptures).where(eq(memoryCaptures.runId, second.id))
    await app.db.update(memoryCaptures).set({ state: 'pending', attempts: 0 }).where(eq(memoryCaptures.id, row!.id))
    t.equal(await app.memory.worker!.runOnce(), 1)
    t.equal((await app.db.select().from(memoryItems)).length, 2)
    t.equal((await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().total, 2)
    await app.inject({ method: 'DELETE', url: `/api/memory/item/${browse.items[0].id}` })
    t.equal(
      (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().total,
      1,
      'the count follows deletes'
    )
  }
)
