import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import type { Clock } from '../../src/worker-loop.js'
import { createTestDatabase, mintKey, secondHandle, signUpWithOrg, waitFor, type Teardown } from '../helper.js'
import { buildAutomationsApp, create, FakeClock, firesOf, QUIET, tickThrough } from './group.js'

/** The automations group alone: no run runs here (runs.test.ts runs them, in the whole app). */
async function scheduled(t: Teardown, clock: Clock) {
  const app = await buildAutomationsApp(t, { clock, env: QUIET })
  const owner = await signUpWithOrg(app)
  return { app, owner, headers: { cookie: owner.cookie } }
}

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

t.test(
  'two instances on one database, a minute cron, 60 fake minutes: exactly 60 runs; disabling stops both at once',
  async (t) => {
    const db = await createTestDatabase(t)
    const clock = new FakeClock('2026-07-01T10:00:30Z')
    const a = await buildAutomationsApp(t, { db, clock, env: QUIET })
    const b = await buildAutomationsApp(t, { db: await secondHandle(t, db), clock, env: QUIET })
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

t.test('the scheduler on a real timer fires a tick as it comes', async (t) => {
  let offset = 0
  const clock: Clock = { now: () => new Date(Date.now() + offset) }
  const app = await buildAutomationsApp(t, { clock, env: { SCHEDULER_POLL_MS: '200', RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(app)
  // from now on the clock reads a little before a minute, moving in real time
  offset = Math.ceil(Date.now() / 60_000) * 60_000 + 60_000 - 1000 - Date.now()
  const job = await create(app, { cookie: owner.cookie }, { cron: '* * * * *' })
  const fired = await waitFor('the tick fired', async () => (await firesOf(app, { cookie: owner.cookie }, job.id))[0])
  t.equal(Date.parse(fired) % 60_000, 0, 'on a minute')
})
