import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import type { Clock } from '../../src/worker-loop.js'
import {
  buildTestApp,
  createTestDatabase,
  mintKey,
  secondHandle,
  signUpWithOrg,
  waitFor,
  type Teardown
} from '../helper.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

/** A clock the test moves: no sleeping through hours. */
class FakeClock implements Clock {
  private ms: number
  constructor(iso: string) {
    this.ms = Date.parse(iso)
  }
  now() {
    return new Date(this.ms)
  }
  set(iso: string | number) {
    this.ms = typeof iso === 'number' ? iso : Date.parse(iso)
  }
}

const QUIET = { SCHEDULER: 'false', RUN_WORKER_CONCURRENCY: '0' }

async function scheduled(t: Teardown, clock: Clock, env: Record<string, string> = {}) {
  const app = await buildTestApp(t, { clock, env: { ...QUIET, ...env } })
  const owner = await signUpWithOrg(app)
  return { app, owner, headers: { cookie: owner.cookie } }
}

async function create(app: App, headers: Record<string, string>, body: Record<string, unknown>) {
  const res = await app.inject({
    method: 'POST',
    url: '/api/automations',
    headers,
    payload: { name: 'job', target: { prompt: 'tick' }, ...body }
  })
  if (res.statusCode !== 201) throw new Error(`create: ${res.statusCode} ${res.body}`)
  return res.json().automation
}

/** Moves the clock from `from` to `to` in steps, letting the scheduler fire at each. */
async function tickThrough(apps: App[], clock: FakeClock, from: string, to: string, stepMs = 60_000) {
  for (let at = Date.parse(from); at <= Date.parse(to); at += stepMs) {
    clock.set(at)
    await Promise.all(apps.map((app) => app.automations.scheduler.fireDue()))
  }
}

const firesOf = async (app: App, headers: Record<string, string>, id: string): Promise<string[]> =>
  (await app.inject({ method: 'GET', url: `/api/automations/${id}/fires?limit=200`, headers }))
    .json()
    .items.map((f: { scheduledFor: string }) => f.scheduledFor)
    .reverse()

t.test('CRUD: description, next five runs, validation answered at once, key reads', async (t) => {
  const clock = new FakeClock('2026-03-28T12:00:00Z')
  const { app, headers } = await scheduled(t, clock)
  const created = await app.inject({
    method: 'POST',
    url: '/api/automations',
    headers,
    payload: { name: 'Nightly', cron: '30 2 * * *', timezone: 'Europe/Berlin', target: { prompt: 'summarise the day' } }
  })
  t.equal(created.statusCode, 201)
  const a = created.json().automation
  t.same(Object.keys(a).sort(), [
    'catchUp',
    'createdAt',
    'createdBy',
    'cron',
    'description',
    'enabled',
    'id',
    'lastFiredAt',
    'lastRunId',
    'name',
    'nextRuns',
    'target',
    'timezone',
    'updatedAt'
  ])
  t.match(a, {
    name: 'Nightly',
    enabled: true,
    catchUp: 'latest',
    description: 'At 02:30',
    target: { prompt: 'summarise the day' },
    lastFiredAt: null,
    lastRunId: null
  })
  t.same(
    a.nextRuns,
    [
      '2026-03-29T01:00:00.000Z',
      '2026-03-30T00:30:00.000Z',
      '2026-03-31T00:30:00.000Z',
      '2026-04-01T00:30:00.000Z',
      '2026-04-02T00:30:00.000Z'
    ],
    'the skipped 02:30 at 03:00 local'
  )

  for (const [body, path] of [
    [{ cron: '0 0 30 2 *' }, '/body/cron'],
    [{ cron: 'not a cron' }, '/body/cron'],
    [{ cron: '* * * * * *' }, '/body/cron'],
    [{ cron: '61 * * * *' }, '/body/cron'],
    [{ cron: '0 0 * * *', timezone: 'Mars/Olympus' }, '/body/timezone'],
    [{ cron: '0 0 * * *', timezone: '+02:00' }, '/body/timezone']
  ] as const) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/automations',
      headers,
      payload: { name: 'x', target: { prompt: 'p' }, ...body }
    })
    t.equal(res.statusCode, 400, JSON.stringify(body))
    t.match(res.json(), { error: 'validation_failed', details: [{ path }] })
  }
  const noEngine = await app.inject({
    method: 'POST',
    url: '/api/automations',
    headers,
    payload: { name: 'x', cron: '@daily', target: { prompt: 'p', engine: 'nope' } }
  })
  t.equal(noEngine.statusCode, 400)
  t.equal(noEngine.json().error, 'engine_unavailable')
  const noSkill = await app.inject({
    method: 'POST',
    url: '/api/automations',
    headers,
    payload: { name: 'x', cron: '@daily', target: { skillId: 'missing' } }
  })
  t.equal(noSkill.statusCode, 404)
  const mixed = await app.inject({
    method: 'POST',
    url: '/api/automations',
    headers,
    payload: { name: 'x', cron: '@daily', target: { prompt: 'p', skillId: 's' } }
  })
  t.equal(mixed.statusCode, 400, 'one kind of target')

  const off = await app.inject({
    method: 'PATCH',
    url: `/api/automations/${a.id}`,
    headers,
    payload: { enabled: false, catchUp: 'skip' }
  })
  t.equal(off.statusCode, 200)
  t.match(off.json().automation, { enabled: false, catchUp: 'skip', nextRuns: [] })
  const moved = await app.inject({
    method: 'PATCH',
    url: `/api/automations/${a.id}`,
    headers,
    payload: { enabled: true, cron: '0 9 * * MON-FRI', timezone: 'America/New_York' }
  })
  t.match(moved.json().automation, {
    description: 'At 09:00, Monday through Friday',
    nextRuns: ['2026-03-30T13:00:00.000Z']
  })
  t.equal(
    (await app.inject({ method: 'PATCH', url: `/api/automations/${a.id}`, headers, payload: { cron: '0 0 31 4 *' } }))
      .statusCode,
    400
  )

  const key = await mintKey(app, headers.cookie)
  const auth = { authorization: key.authorization }
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/automations', headers: auth })).json().items.length,
    1,
    'a key reads the list'
  )
  t.equal((await app.inject({ method: 'GET', url: `/api/automations/${a.id}`, headers: auth })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: `/api/automations/${a.id}/fires`, headers: auth })).statusCode, 200)
  t.equal(
    (await app.inject({ method: 'POST', url: `/api/automations/${a.id}/trigger`, headers: auth })).statusCode,
    401,
    'a key does not trigger'
  )
  t.equal((await app.inject({ method: 'DELETE', url: `/api/automations/${a.id}`, headers: auth })).statusCode, 401)

  const stranger = await signUpWithOrg(app)
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/automations/${a.id}`, headers: { cookie: stranger.cookie } }))
      .statusCode,
    404
  )
  t.equal((await app.inject({ method: 'DELETE', url: `/api/automations/${a.id}`, headers })).statusCode, 204)
  t.equal((await app.inject({ method: 'GET', url: `/api/automations/${a.id}`, headers })).statusCode, 404)
})

t.test(
  'DST, Europe/Berlin: 30 2 * * * fires once at 01:00Z on 2026-03-29 and once at 00:30Z on 2026-10-25',
  async (t) => {
    const clock = new FakeClock('2026-03-28T23:00:00Z')
    const { app, headers } = await scheduled(t, clock)
    const a = await create(app, headers, { cron: '30 2 * * *', timezone: 'Europe/Berlin' })
    await tickThrough([app], clock, '2026-03-28T23:00:00Z', '2026-03-29T03:00:00Z')
    t.same(
      await firesOf(app, headers, a.id),
      ['2026-03-29T01:00:00.000Z'],
      'spring forward: the skipped 02:30 fires once, at 03:00 local'
    )
    clock.set('2026-10-24T22:00:00Z')
    await app.inject({
      method: 'PATCH',
      url: `/api/automations/${a.id}`,
      headers,
      payload: { catchUp: 'skip', cron: '30 2 * * *' }
    })
    await tickThrough([app], clock, '2026-10-24T22:00:00Z', '2026-10-25T03:00:00Z')
    t.same(
      (await firesOf(app, headers, a.id)).slice(1),
      ['2026-10-25T00:30:00.000Z'],
      'fall back: the repeated 02:30 fires once, at its first occurrence'
    )
  }
)

t.test('DST, Europe/Berlin: */15 * * * * fires 8 times between 00:00Z and 02:00Z on 2026-10-25', async (t) => {
  const clock = new FakeClock('2026-10-24T23:50:00Z')
  const { app, headers } = await scheduled(t, clock)
  const a = await create(app, headers, { cron: '*/15 * * * *', timezone: 'Europe/Berlin' })
  await tickThrough([app], clock, '2026-10-24T23:50:00Z', '2026-10-25T01:59:00Z')
  const fires = await firesOf(app, headers, a.id)
  t.same(
    fires,
    ['00:00', '00:15', '00:30', '00:45', '01:00', '01:15', '01:30', '01:45'].map((hm) => `2026-10-25T${hm}:00.000Z`)
  )
})

t.test('fires page by tick; a cursor that is not a tick of the list is 400 naming it', async (t) => {
  const clock = new FakeClock('2026-05-31T23:59:00Z')
  const { app, headers } = await scheduled(t, clock)
  const a = await create(app, headers, { cron: '*/15 * * * *' })
  await tickThrough([app], clock, '2026-05-31T23:59:00Z', '2026-06-01T00:59:00Z')
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const url: string = `/api/automations/${a.id}/fires?limit=2${cursor ? `&cursor=${cursor}` : ''}`
    const res = await app.inject({ method: 'GET', url, headers })
    t.equal(res.statusCode, 200)
    seen.push(...res.json().items.map((f: { scheduledFor: string }) => f.scheduledFor))
    cursor = res.json().nextCursor
  } while (cursor && seen.length < 10)
  t.same(
    seen,
    ['00:45', '00:30', '00:15', '00:00'].map((hm) => `2026-06-01T${hm}:00.000Z`)
  )
  // a tick past what a date holds, a key that is not a number, a tick with padding, not base64url
  for (const bad of [
    Buffer.from('9999999999999999').toString('base64url'),
    Buffer.from('not-a-tick').toString('base64url'),
    `${Buffer.from('1780272000000').toString('base64url')}=`,
    'a.b'
  ]) {
    const res = await app.inject({ method: 'GET', url: `/api/automations/${a.id}/fires?cursor=${bad}`, headers })
    t.equal(res.statusCode, 400, bad)
    t.match(res.json(), { error: 'validation_failed', details: [{ path: '/querystring/cursor' }] })
  }
})

t.test("DST elsewhere: America/Santiago midnight on 2026-09-06, Australia/Lord_Howe's half-hour changes", async (t) => {
  const clock = new FakeClock('2026-09-05T12:00:00Z')
  const { app, headers } = await scheduled(t, clock)
  const santiago = await create(app, headers, { cron: '0 0 * * *', timezone: 'America/Santiago' })
  const howeSpring = await create(app, headers, { cron: '15 2 * * *', timezone: 'Australia/Lord_Howe' })
  await tickThrough([app], clock, '2026-09-05T12:00:00Z', '2026-09-06T12:00:00Z', 5 * 60_000)
  t.same(
    await firesOf(app, headers, santiago.id),
    ['2026-09-06T04:00:00.000Z'],
    'midnight does not exist on 2026-09-06: fired once, at 01:00 local'
  )

  // Lord Howe moves by 30 minutes: 02:00 → 02:30 on 2026-10-04, 02:00 → 01:30 on 2026-04-05
  clock.set('2026-10-03T12:00:00Z')
  await app.inject({
    method: 'PATCH',
    url: `/api/automations/${howeSpring.id}`,
    headers,
    payload: { cron: '15 2 * * *' }
  })
  await tickThrough([app], clock, '2026-10-03T12:00:00Z', '2026-10-04T12:00:00Z', 5 * 60_000)
  t.same(
    (await firesOf(app, headers, howeSpring.id)).filter((f) => f >= '2026-10'),
    ['2026-10-03T15:30:00.000Z'],
    '02:15 is in the 30-minute gap: fired once, at 02:30 local'
  )
  const howeFall = await (async () => {
    clock.set('2026-04-04T12:00:00Z')
    return create(app, headers, { cron: '45 1 * * *', timezone: 'Australia/Lord_Howe' })
  })()
  await tickThrough([app], clock, '2026-04-04T12:00:00Z', '2026-04-05T12:00:00Z', 5 * 60_000)
  t.same(
    await firesOf(app, headers, howeFall.id),
    ['2026-04-04T14:45:00.000Z'],
    '01:45 happens twice: fired once, at its first occurrence (+11:00)'
  )
})

t.test('catchUp after a gap with no instance: latest fires one run for the latest tick, skip none', async (t) => {
  const clock = new FakeClock('2026-05-01T00:00:30Z')
  const { app, headers } = await scheduled(t, clock)
  const latest = await create(app, headers, { cron: '0 * * * *', catchUp: 'latest' })
  const skip = await create(app, headers, { cron: '0 * * * *', catchUp: 'skip' })
  clock.set('2026-05-01T05:20:00Z') // five ticks passed while nothing ran
  t.equal(await app.automations.scheduler.fireDue(), 1)
  t.same(await firesOf(app, headers, latest.id), ['2026-05-01T05:00:00.000Z'])
  t.same(await firesOf(app, headers, skip.id), [])
  t.match((await app.inject({ method: 'GET', url: `/api/automations/${skip.id}`, headers })).json().automation, {
    nextRuns: ['2026-05-01T06:00:00.000Z'],
    lastFiredAt: null
  })
  clock.set('2026-05-01T06:00:00.400Z')
  t.equal(await app.automations.scheduler.fireDue(), 2, 'both fire on time again')
})

t.test('fires and triggers start runs: prompt, skill and playbook targets, origin automation', async (t) => {
  const clock = new FakeClock('2026-06-01T08:59:59Z')
  const { app, headers } = await scheduled(t, clock, { RUN_WORKER_CONCURRENCY: '4', RUN_POLL_MS: '50' })
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'report', description: 'Report', instructions: 'Write the report.' }
    })
  ).json().skill
  const second = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'review', description: 'Review', instructions: 'Review it.' }
    })
  ).json().skill
  const playbook = (
    await app.inject({
      method: 'POST',
      url: '/api/playbooks',
      headers,
      payload: { name: 'Both', steps: [{ skillId: skill.id }, { skillId: second.id }] }
    })
  ).json().playbook
  const byPrompt = await create(app, headers, { cron: '0 9 * * *', target: { prompt: 'good morning' } })
  const bySkill = await create(app, headers, { cron: '0 9 * * *', target: { skillId: skill.id, input: 'for June' } })
  const byPlaybook = await create(app, headers, { cron: '0 9 * * *', target: { playbookId: playbook.id } })
  clock.set('2026-06-01T09:00:00.250Z')
  t.equal(await app.automations.scheduler.fireDue(), 3)

  const runs = rowsOf<{
    id: string
    prompt: string
    instructions: string | null
    origin: string
    metadata: unknown
    status: string
    root_run_id: string
  }>(
    await app.db.execute(
      sql`select id, prompt, instructions, origin, metadata, status, root_run_id from runs order by id`
    )
  )
  const meta = (r: { metadata: unknown }) =>
    (typeof r.metadata === 'string' ? JSON.parse(r.metadata) : r.metadata) as Record<string, unknown>
  const of = (id: string) => runs.find((r) => meta(r).automationId === id)!
  t.match(of(byPrompt.id), { prompt: 'good morning', origin: 'automation' })
  t.same(meta(of(byPrompt.id)), { automationId: byPrompt.id, scheduledFor: '2026-06-01T09:00:00.000Z' })
  t.match(of(bySkill.id), { prompt: 'for June', instructions: 'Write the report.', origin: 'automation' })
  t.match(meta(of(bySkill.id)), { skillId: skill.id, skillVersion: 1, automationId: bySkill.id })
  const root = of(byPlaybook.id)
  t.match(meta(root), { playbookId: playbook.id, playbookStep: 0, automationId: byPlaybook.id })
  await waitFor('the playbook ran both steps', async () => {
    const rows = rowsOf<{ status: string }>(
      await app.db.execute(sql`select status from runs where root_run_id = ${root.id}`)
    )
    return rows.length === 2 && rows.every((r) => r.status === 'succeeded')
  })
  t.match((await app.inject({ method: 'GET', url: `/api/automations/${byPrompt.id}`, headers })).json().automation, {
    lastFiredAt: '2026-06-01T09:00:00.250Z',
    lastRunId: of(byPrompt.id).id
  })
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/skills/${skill.id}`, headers })).statusCode,
    409,
    'a skill an automation runs stays'
  )
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/playbooks/${playbook.id}`, headers })).statusCode,
    409,
    'so does a playbook'
  )

  const trig = { ...headers, 'idempotency-key': 'trigger-1' }
  const triggered = await app.inject({ method: 'POST', url: `/api/automations/${bySkill.id}/trigger`, headers: trig })
  t.equal(triggered.statusCode, 201)
  t.match(triggered.json().run, {
    origin: 'automation',
    metadata: { automationId: bySkill.id, scheduledFor: null, skillId: skill.id }
  })
  const again = await app.inject({ method: 'POST', url: `/api/automations/${bySkill.id}/trigger`, headers: trig })
  t.equal(again.json().run.id, triggered.json().run.id, 'a retried trigger is the same run')
  t.same(await firesOf(app, headers, bySkill.id), ['2026-06-01T09:00:00.000Z'], 'a trigger is not a fire')
  await app.inject({ method: 'PATCH', url: `/api/automations/${byPrompt.id}`, headers, payload: { enabled: false } })
  t.equal(
    (await app.inject({ method: 'POST', url: `/api/automations/${byPrompt.id}/trigger`, headers })).statusCode,
    201,
    'a disabled automation can still be triggered'
  )
})

t.test(
  'two instances on one database, a minute cron, 60 fake minutes: exactly 60 runs; disabling stops both at once',
  async (t) => {
    const db = await createTestDatabase(t)
    const clock = new FakeClock('2026-07-01T10:00:30Z')
    const a = await buildTestApp(t, { db, clock, env: QUIET })
    const b = await buildTestApp(t, { db: await secondHandle(t, db), clock, env: QUIET })
    const owner = await signUpWithOrg(a)
    const headers = { cookie: owner.cookie }
    const every = await create(a, headers, { cron: '* * * * *' })
    // both instances look several times a minute, at the same moments
    await tickThrough([a, b], clock, '2026-07-01T10:00:30Z', '2026-07-01T11:00:29Z', 15_000)
    const fires = await firesOf(a, headers, every.id)
    t.equal(fires.length, 60)
    t.equal(new Set(fires).size, 60)
    const runs = rowsOf<{ n: number | string }>(
      await a.db.execute(sql`select count(*) as n from runs where metadata->>'automationId' = ${every.id}`)
    )
    t.equal(Number(runs[0]!.n), 60, 'one run per tick')

    await b.inject({ method: 'PATCH', url: `/api/automations/${every.id}`, headers, payload: { enabled: false } })
    clock.set('2026-07-01T11:05:00Z')
    t.equal(await a.automations.scheduler.fireDue(), 0, 'disabled on B: A fires nothing')
    await b.inject({ method: 'PATCH', url: `/api/automations/${every.id}`, headers, payload: { enabled: true } })
    await b.inject({ method: 'DELETE', url: `/api/automations/${every.id}`, headers })
    clock.set('2026-07-01T11:06:00Z')
    t.equal(await a.automations.scheduler.fireDue(), 0, 'deleted on B: A fires nothing')
  }
)

t.test('an instance killed mid-fire: the tick still starts exactly one run', async (t) => {
  const db = await createTestDatabase(t)
  const clock = new FakeClock('2026-08-01T06:59:00Z')
  const env = { SCHEDULER: 'false', RUN_POLL_MS: '50', RUN_SWEEP_MS: '100' }
  const a = await buildTestApp(t, { db, clock, env: { ...env, RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(a)
  const headers = { cookie: owner.cookie }
  const job = await create(a, headers, { cron: '0 7 * * *' })
  clock.set('2026-08-01T07:00:00.100Z')

  // A dies inside the fire transaction, before it commits: nothing of it stays
  a.automations.scheduler.beforeCommit = async () => {
    throw new Error('killed')
  }
  await t.rejects(a.automations.scheduler.fireDue(), /killed/)
  t.equal(rowsOf(await a.db.execute(sql`select 1 from automation_fires`)).length, 0, 'no fire row')
  t.equal(rowsOf(await a.db.execute(sql`select 1 from runs`)).length, 0, 'no run')

  // A again, this time dying right after its commit, before announcing the run
  a.automations.scheduler.beforeCommit = async () => a.automations.scheduler.kill()
  t.equal(await a.automations.scheduler.fireDue(), 0, 'killed: it announces nothing')
  const b = await buildTestApp(t, {
    db: await secondHandle(t, db),
    clock,
    env: { ...env, RUN_WORKER_CONCURRENCY: '2' }
  })
  t.equal(await b.automations.scheduler.fireDue(), 0, 'B finds the tick fired')
  const run = await waitFor("B's sweeper announced the run and B ran it", async () => {
    const rows = rowsOf<{ id: string; status: string }>(await b.db.execute(sql`select id, status from runs`))
    return rows.length === 1 && rows[0]!.status === 'succeeded' ? rows[0] : null
  })
  t.same(await firesOf(b, headers, job.id), ['2026-08-01T07:00:00.000Z'])
  const started = rowsOf(
    await b.db.execute(sql`select 1 from run_events where run_id = ${run.id} and type = 'run.started'`)
  )
  t.equal(started.length, 1, 'started once')
})

t.test('the scheduler on a real timer fires a tick as it comes', async (t) => {
  let offset = 0
  const clock: Clock = { now: () => new Date(Date.now() + offset) }
  const app = await buildTestApp(t, { clock, env: { SCHEDULER_POLL_MS: '200', RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(app)
  // from now on the clock reads a little before a minute, moving in real time
  offset = Math.ceil(Date.now() / 60_000) * 60_000 + 60_000 - 1000 - Date.now()
  const job = await create(app, { cookie: owner.cookie }, { cron: '* * * * *' })
  const fired = await waitFor('the tick fired', async () => (await firesOf(app, { cookie: owner.cookie }, job.id))[0])
  t.equal(Date.parse(fired) % 60_000, 0, 'on a minute')
})
