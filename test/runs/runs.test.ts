import { eq, sql } from 'drizzle-orm'
import t from 'tap'
import { organizations } from '../../src/auth/tables.js'
import { rowsOf } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import type { CapturedFact, RunMemory } from '../../src/runs/ports/memory.js'
import { createRun } from '../../src/runs/runs-repo.js'
import { UNANNOUNCED_AFTER_MS } from '../../src/runs/sweeper.js'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { runEvents, runs } from '../../src/runs/tables.js'
import { startAttempt } from '../../src/runtime/attempts-repo.js'
import { toolCallAttempts } from '../../src/runtime/tables.js'
import { buildTestApp } from '../helper.js'
import { buildRunsApp } from './group.js'
import { eventually } from './sse-client.js'

const fast = { RUN_POLL_MS: '50', RUN_SWEEP_MS: '100' }

async function waitFinished(app: Awaited<ReturnType<typeof buildRunsApp>>, id: string) {
  return eventually(async () => {
    const res = await app.inject({ method: 'GET', url: `/api/runs/${id}` })
    const run = res.json().run
    return ['succeeded', 'failed', 'cancelled'].includes(run.status) ? run : null
  })
}

t.test('create, read, list and finish a run with the echo engine', async (t) => {
  const recalled: string[] = []
  const captured: Array<{ runId: string; facts: Array<string | CapturedFact> }> = []
  const memory: RunMemory = {
    enabled: async () => true,
    settingsFor: async () => ({ enabled: true, extract: false }),
    async recall(run, query) {
      recalled.push(query)
      return {
        items: [
          { id: 'm1', content: 'x', sourceScope: 'org', score: 1 },
          { id: 'm2', content: 'y', sourceScope: 'org', score: 0.5 }
        ],
        query: `searched: ${query}`
      }
    },
    async enqueueCapture(_tx, run, facts) {
      captured.push({ runId: run.id, facts })
    }
  }
  const app = await buildRunsApp(t, { env: fast, runMemory: memory })
  const prompt = 'Hello there world. Please REMEMBER the blue door! Nothing else. remember: tea at five?'
  const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt, metadata: { a: 1 } } })
  t.equal(res.statusCode, 201)
  const { run } = res.json()
  t.match(run, {
    prompt,
    engine: 'echo',
    model: 'echo',
    origin: 'dev',
    status: 'queued',
    error: null,
    parentRunId: null,
    metadata: { a: 1 }
  })
  t.equal(run.rootRunId, run.id, 'a new run is its own thread root')
  t.ok(run.userId, 'dev user')
  t.ok(!('orgId' in run), 'no org id on the wire')

  const done = await waitFinished(app, run.id)
  t.equal(done.status, 'succeeded')
  t.ok(done.startedAt && done.finishedAt)
  t.same(recalled, [prompt], 'recalled with the prompt as query')
  t.same(captured, [{ runId: run.id, facts: ['Please REMEMBER the blue door!', 'remember: tea at five?'] }])

  const events = await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(runEvents.id)
  const types = events.map((e) => e.type)
  t.same(types.slice(0, 3), ['run.queued', 'run.started', 'memory.recalled'])
  t.same(
    events[2]!.data,
    { query: `searched: ${prompt}`, itemIds: ['m1', 'm2'], count: 2 },
    'the event names what was searched'
  )
  const deltas = events
    .filter((e) => e.type === 'message.delta')
    .map((e) => e.data.text)
    .join('')
  t.equal(deltas, prompt.split(/\s+/).join(' '), 'the deltas spell the prompt word by word')
  t.same(types.slice(-2), ['message.completed', 'run.succeeded'])
  for (let i = 1; i < events.length; i++) t.ok(events[i]!.id > events[i - 1]!.id)

  const list = await app.inject({ method: 'GET', url: '/api/runs?status=succeeded' })
  t.equal(list.statusCode, 200)
  t.same(
    list.json().items.map((r: { id: string }) => r.id),
    [run.id]
  )
  t.equal(list.json().nextCursor, null)
})

t.test(
  'a run is claimed only once its run.queued is stored; the sweeper announces one whose instance died first',
  async (t) => {
    const app = await buildRunsApp(t, { env: fast })
    // what an instance that died right after committing the run leaves: a run, no run.queued
    const run = (await app.db.transaction((tx) =>
      createRun(
        tx,
        { kind: 'dev', orgId: DEV_ORG.id, userId: null, role: 'owner' },
        { prompt: 'late', engine: 'echo', model: 'echo', origin: 'api' }
      )
    ))!
    // a later run, dispatched as usual: the worker claims it, passing the unannounced one over
    // (the oldest runnable run of an org is the one a claim takes)
    const later = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'later' } })).json().run
    const ended = await app.inject({ method: 'GET', url: `/api/runs/${later.id as string}?wait=60` })
    t.equal(ended.json().run.status, 'succeeded', 'the later run ran')
    const typesOf = async (runId: string) =>
      await app.db.select().from(runEvents).where(eq(runEvents.runId, runId)).orderBy(runEvents.id)
    const laterStarted = (await typesOf(later.id)).find((e) => e.type === 'run.started')!
    const announced = (await typesOf(run.id)).find((e) => e.type === 'run.queued')
    t.ok(
      announced === undefined || announced.id > laterStarted.id,
      'not claimed without its run.queued: the later run was claimed while this one had none'
    )
    // the sweeper announces a run only once it is UNANNOUNCED_AFTER_MS old by the database's
    // clock: the run is made that old instead of the test waiting for it
    await app.db.execute(
      sql`update runs set created_at = created_at - make_interval(secs => ${UNANNOUNCED_AFTER_MS / 1000 + 1}) where id = ${run.id}`
    )
    const done = await eventually(async () => {
      const [row] = await app.db.select().from(runs).where(eq(runs.id, run.id))
      return row!.status === 'succeeded' ? row : null
    })
    t.equal(done.status, 'succeeded')
    const events = await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(runEvents.id)
    const lifecycle = events.map((e) => e.type).filter((type) => type.startsWith('run.'))
    t.same(lifecycle, ['run.queued', 'run.started', 'run.succeeded'], 'queued first, once')
  }
)

t.test('threads, paging, filters and joining', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const first = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'one' } })).json().run
  const second = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'two', rootRunId: first.id } })
  ).json().run
  const third = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'three', rootRunId: second.id } })
  ).json().run
  const other = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'other thread' } })).json().run
  t.equal(second.rootRunId, first.id)
  t.equal(second.parentRunId, first.id)
  t.equal(third.rootRunId, first.id, 'joining by a non-root run joins its thread')
  t.equal(third.parentRunId, second.id)

  const page1 = (await app.inject({ method: 'GET', url: '/api/runs?limit=2' })).json()
  t.same(
    page1.items.map((r: { id: string }) => r.id),
    [other.id, third.id]
  )
  t.ok(page1.nextCursor)
  const page2 = (await app.inject({ method: 'GET', url: `/api/runs?limit=2&cursor=${page1.nextCursor}` })).json()
  t.same(
    page2.items.map((r: { id: string }) => r.id),
    [second.id, first.id]
  )
  t.equal(page2.nextCursor, null)
  const inThread = (await app.inject({ method: 'GET', url: `/api/runs?rootRunId=${first.id}` })).json()
  t.equal(inThread.items.length, 3)

  const threads = (await app.inject({ method: 'GET', url: '/api/threads' })).json()
  t.same(
    threads.items.map((th: { rootRunId: string }) => th.rootRunId),
    [other.id, first.id]
  )
  t.match(threads.items[1], { title: 'one', runCount: 3, latestRunId: third.id, latestStatus: 'queued' })
  const thread = await app.inject({ method: 'GET', url: `/api/threads/${first.id}` })
  t.equal(thread.statusCode, 200)
  t.same(
    thread.json().runs.map((r: { id: string }) => r.id),
    [first.id, second.id, third.id]
  )
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/threads/${second.id}` })).statusCode,
    404,
    'a non-root id is not a thread'
  )

  const missing = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x', rootRunId: newId() } })
  t.equal(missing.statusCode, 404)
  t.equal(missing.json().error, 'not_found')
})

t.test('cancel: queued at once, idempotent, finished runs unchanged', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'wait' } })).json().run
  const a = await app.inject({ method: 'POST', url: `/api/runs/${run.id}/cancel` })
  t.equal(a.statusCode, 200)
  t.equal(a.json().run.status, 'cancelled')
  t.ok(a.json().run.finishedAt)
  const b = await app.inject({ method: 'POST', url: `/api/runs/${run.id}/cancel` })
  t.equal(b.statusCode, 200)
  t.same(b.json().run, a.json().run, 'cancelling twice changes nothing')
  const cancelled = await app.db.select().from(runEvents).where(eq(runEvents.type, 'run.cancelled'))
  t.equal(cancelled.length, 1, 'one run.cancelled event')
  t.equal((await app.inject({ method: 'POST', url: `/api/runs/${newId()}/cancel` })).statusCode, 404)
})

t.test('a running run is cancelled by its worker', async (t) => {
  const app = await buildRunsApp(t, { env: { ...fast, ECHO_WORD_DELAY_MS: '100' } })
  const run = (
    await app.inject({
      method: 'POST',
      url: '/api/runs',
      payload: { prompt: 'a b c d e f g h i j k l m n o p q r s t u v w x y z' }
    })
  ).json().run
  await eventually(
    async () => (await app.inject({ method: 'GET', url: `/api/runs/${run.id}` })).json().run.status === 'running'
  )
  const res = await app.inject({ method: 'POST', url: `/api/runs/${run.id}/cancel` })
  t.equal(res.statusCode, 200)
  const done = await waitFinished(app, run.id)
  t.equal(done.status, 'cancelled')
  const types = (await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id))).map((e) => e.type)
  t.equal(types.at(-1), 'run.cancelled')
  t.notOk(types.includes('run.succeeded'))
})

t.test('bad input is a clear 4xx and changes nothing', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const cases: Array<[string, unknown, number, string]> = [
    ['{"prompt":', undefined, 400, 'invalid_json'],
    [JSON.stringify({ prompt: 'x', origin: 'web' }), undefined, 400, 'server_owned_field'],
    [JSON.stringify({ prompt: 'x', orgId: 'o' }), undefined, 400, 'server_owned_field'],
    [JSON.stringify({ prompt: 'x', userId: 'u' }), undefined, 400, 'server_owned_field'],
    [JSON.stringify({ prompt: 42 }), undefined, 400, 'validation_failed'],
    [JSON.stringify({ prompt: '' }), undefined, 400, 'validation_failed'],
    [JSON.stringify({}), undefined, 400, 'validation_failed'],
    [JSON.stringify({ prompt: 'x', rootRunId: '../../etc' }), undefined, 400, 'validation_failed'],
    [JSON.stringify({ prompt: 'x', engine: 'nope' }), undefined, 400, 'engine_unavailable'],
    [JSON.stringify({ prompt: 'x', model: 'gpt-nope' }), undefined, 400, 'engine_unavailable'],
    [JSON.stringify({ prompt: 'x', engine: 'openai' }), undefined, 400, 'engine_unavailable'],
    [JSON.stringify({ prompt: 'x'.repeat(2 * 1024 * 1024) }), undefined, 413, 'payload_too_large']
  ]
  for (const [payload, , status, error] of cases) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { 'content-type': 'application/json' },
      payload
    })
    t.equal(res.statusCode, status, payload.slice(0, 60))
    t.equal(res.json().error, error, payload.slice(0, 60))
    t.type(res.json().message, 'string')
  }
  for (const url of [
    '/api/runs/%27%3B--',
    '/api/runs/' + 'a'.repeat(65),
    '/api/threads/..%2F..',
    '/api/runs?limit=0',
    '/api/runs?limit=201',
    '/api/runs?status=weird',
    '/api/runs?foo=1'
  ]) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 400, url)
    t.equal(res.json().error, 'validation_failed', url)
  }
  // a cursor the list did not give out is refused, never read as the first page
  for (const cursor of [
    '%25%25%25',
    '',
    'AAAA',
    'bm90IGFuIGlk',
    `${Buffer.from('0190b8f0-0000-7000-8000-000000000000').toString('base64url')}=`
  ]) {
    const res = await app.inject({ method: 'GET', url: `/api/runs?cursor=${cursor}` })
    t.equal(res.statusCode, 400, `cursor ${cursor}`)
    t.equal(res.json().error, 'validation_failed')
    t.same(
      res.json().details.map((d: { path: string }) => d.path),
      ['/querystring/cursor']
    )
  }
  const count = rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from runs`))[0]!.n
  t.equal(count, 0, 'nothing was created')
})

t.test("another org's runs are 404 and never listed", async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const otherOrg = { id: newId(), name: 'Other', slug: 'other' }
  await app.db.insert(organizations).values(otherOrg)
  const foreign = await app.db.transaction((tx) =>
    createRun(
      tx,
      { kind: 'dev', orgId: otherOrg.id, userId: null, role: 'owner' },
      {
        prompt: 'secret',
        engine: 'echo',
        model: 'echo',
        origin: 'api'
      }
    )
  )
  const id = foreign!.id
  for (const [method, url] of [
    ['GET', `/api/runs/${id}`],
    ['POST', `/api/runs/${id}/cancel`],
    ['GET', `/api/threads/${id}`],
    ['GET', `/api/runs/${id}/events`],
    ['GET', `/api/runs/${id}/thread-events`]
  ] as const) {
    const res = await app.inject({ method, url })
    t.equal(res.statusCode, 404, `${method} ${url}`)
    t.equal(res.json().error, 'not_found')
  }
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'join', rootRunId: id } })).statusCode,
    404
  )
  t.same((await app.inject({ method: 'GET', url: '/api/runs' })).json().items, [])
  t.same((await app.inject({ method: 'GET', url: '/api/threads' })).json().items, [])
  const [still] = await app.db.select().from(runs).where(eq(runs.id, id))
  t.equal(still!.status, 'queued', 'the cancel did not touch it')
})

// GET /api/config is the system group's: the whole app
t.test('/api/config lists the echo engine', async (t) => {
  const app = await buildTestApp(t)
  const body = (await app.inject({ method: 'GET', url: '/api/config' })).json()
  t.same(body.engines, [{ id: 'echo', name: 'Echo (offline, for development and tests)' }])
  t.same(body.models, [{ id: 'echo', engine: 'echo', name: 'Echo (offline)' }])
})

t.test('the RunEventSink stores and numbers a memory.captured event', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x' } })).json().run
  await app.memory.events.emit({
    orgId: '00000000-0000-7000-8000-00000000d001',
    runId: run.id,
    type: 'memory.captured',
    data: { itemCount: 2 }
  })
  const events = await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(runEvents.id)
  t.same(
    events.map((e) => e.type),
    ['run.queued', 'memory.captured']
  )
  t.same(events[1]!.data, { itemCount: 2 })
  await t.rejects(
    app.memory.events.emit({ orgId: newId(), runId: run.id, type: 'memory.captured', data: {} }),
    'another org cannot write into the run'
  )
})

t.test('events past retention are pruned, newer ones kept', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x' } })).json().run
  await app.db.insert(runEvents).values({
    orgId: '00000000-0000-7000-8000-00000000d001',
    runId: run.id,
    rootRunId: run.id,
    type: 'tool.call',
    data: {},
    createdAt: new Date(Date.now() - 8 * 86_400_000)
  })
  await app.db.insert(runEvents).values({
    orgId: '00000000-0000-7000-8000-00000000d001',
    runId: run.id,
    rootRunId: run.id,
    type: 'tool.result',
    data: {},
    createdAt: new Date(Date.now() - 6 * 86_400_000)
  })
  await app.runs.sweeper.prune()
  const left = (await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id))).map((e) => e.type).sort()
  t.same(left, ['run.queued', 'tool.result'], 'only the 8-day-old event went')
})

t.test("an ended run's tool call attempts go with the event retention; a live run keeps its own", async (t) => {
  let now = new Date()
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' }, clock: { now: () => now } })
  const post = async () => (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'x' } })).json().run
  const ended = await post()
  const waiting = await post()
  await app.db.update(runs).set({ status: 'succeeded', finishedAt: new Date() }).where(eq(runs.id, ended.id))
  await app.db.update(runs).set({ status: 'requires_action' }).where(eq(runs.id, waiting.id))
  const gone = newId()
  for (const runId of [ended.id, waiting.id, gone])
    await startAttempt(app.db, { orgId: DEV_ORG.id, runId, round: 0, callId: 'c1' }, null)
  const left = async () =>
    (await app.db.select({ runId: toolCallAttempts.runId }).from(toolCallAttempts)).map((r) => r.runId).sort()

  now = new Date(Date.now() + 6 * 86_400_000)
  await app.runs.sweeper.prune()
  t.same(await left(), [ended.id, waiting.id, gone].sort(), 'six days on (retention 7), every attempt is kept')

  now = new Date(Date.now() + 8 * 86_400_000)
  await app.runs.sweeper.prune()
  t.same(await left(), [waiting.id], "eight days on, the ended run's and the deleted run's attempts went")
})
