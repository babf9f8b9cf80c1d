import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { newId } from '../../src/db/ids.js'
import { addMember, mintKey, signUp, signUpWithOrg } from '../helper.js'
import { buildPlatformApp } from './group.js'

// Usage read from runs inserted as the worker leaves them: the platform group alone. Runs
// executed through the API reach the usage too (test/platform/dashboard.test.ts, the whole app).

/** A finished run as the worker leaves it: the trigger adds it to usage_hours. */
async function finishedRun(
  app: FastifyInstance,
  orgId: string,
  r: {
    at: string
    engine?: string
    model?: string | null
    userId?: string | null
    status?: string
    ms?: number
    tokens?: [number, number]
  }
) {
  const id = newId()
  const finished = new Date(r.at)
  const started = new Date(finished.getTime() - (r.ms ?? 1000))
  await app.db.execute(sql`
    insert into runs (id, org_id, root_run_id, engine, model, prompt, status, origin, user_id, created_at, started_at, finished_at, input_tokens, output_tokens)
    values (${id}, ${orgId}, ${id}, ${r.engine ?? 'echo'}, ${r.model ?? null}, 'p', ${r.status ?? 'succeeded'}, 'api', ${r.userId ?? null},
            ${started.toISOString()}, ${started.toISOString()}, ${finished.toISOString()}, ${r.tokens?.[0] ?? null}, ${r.tokens?.[1] ?? null})`)
  return id
}

t.test('local days of Europe/Berlin across both 2026 changes: 23 and 25 hours, every run on its day', async (t) => {
  const app = await buildPlatformApp(t)
  const owner = await signUpWithOrg(app)
  const org = owner.org.id
  // 2026-03-29: 00:00 CET is 2026-03-28T23:00Z, 24:00 CEST is 2026-03-29T22:00Z (23 hours)
  for (const at of [
    '2026-03-28T22:59:59Z',
    '2026-03-28T23:00:00Z',
    '2026-03-29T01:30:00Z',
    '2026-03-29T21:59:59Z',
    '2026-03-29T22:00:00Z'
  ])
    await finishedRun(app, org, { at })
  // 2026-10-25: 00:00 CEST is 2026-10-24T22:00Z, 24:00 CET is 2026-10-25T23:00Z (25 hours)
  for (const at of [
    '2026-10-24T21:59:59Z',
    '2026-10-24T22:00:00Z',
    '2026-10-25T00:30:00Z',
    '2026-10-25T01:30:00Z',
    '2026-10-25T22:59:59Z',
    '2026-10-25T23:00:00Z'
  ])
    await finishedRun(app, org, { at })
  const get = async (query: string) => {
    const res = await app.inject({ method: 'GET', url: `/api/usage?${query}`, headers: { cookie: owner.cookie } })
    t.equal(res.statusCode, 200, res.body)
    return res.json() as { buckets: Array<{ date: string; runs: number }>; totals: { runs: number } }
  }
  const spring = await get('from=2026-03-28&to=2026-03-30&tz=Europe/Berlin')
  t.same(
    spring.buckets.map((b) => [b.date, b.runs]),
    [
      ['2026-03-28', 1],
      ['2026-03-29', 3],
      ['2026-03-30', 1]
    ]
  )
  const autumn = await get('from=2026-10-24&to=2026-10-26&tz=Europe/Berlin')
  t.same(
    autumn.buckets.map((b) => [b.date, b.runs]),
    [
      ['2026-10-24', 1],
      ['2026-10-25', 4],
      ['2026-10-26', 1]
    ]
  )
  const utc = await get('from=2026-10-24&to=2026-10-26')
  t.same(
    utc.buckets.map((b) => [b.date, b.runs]),
    [
      ['2026-10-24', 2],
      ['2026-10-25', 4],
      ['2026-10-26', 0]
    ],
    'the same runs by UTC days'
  )
  // a half-hour zone: Kolkata's midnight is 18:30Z
  for (const at of ['2026-07-10T18:29:59Z', '2026-07-10T18:30:00Z']) await finishedRun(app, org, { at })
  const kolkata = await get('from=2026-07-10&to=2026-07-11&tz=Asia/Kolkata')
  t.same(
    kolkata.buckets.map((b) => [b.date, b.runs]),
    [
      ['2026-07-10', 1],
      ['2026-07-11', 1]
    ],
    'a +05:30 zone splits at 18:30Z'
  )
  const year = await get('from=2026-01-01&to=2026-12-31&tz=Europe/Berlin')
  t.equal(year.buckets.length, 365, 'zero-filled: every day')
  t.equal(year.totals.runs, 13)
  t.equal(
    year.buckets.reduce((s, b) => s + b.runs, 0),
    year.totals.runs,
    'buckets sum to the totals'
  )
})

t.test(
  "every zone's days are exact at both grains: runs near the midnights of whole-hour, half-hour and quarter-hour zones land on the day Intl gives them",
  async (t) => {
    const app = await buildPlatformApp(t)
    const owner = await signUpWithOrg(app)
    const org = owner.org.id
    // each zone's midnights (DST changes included) ± a second and ± 15 minutes, plus a spread
    // of times, in two engines: the hours a midnight splits are read at the quarter hour
    const zones = [
      'UTC',
      'Europe/Berlin',
      'Asia/Kolkata',
      'Asia/Kathmandu',
      'America/St_Johns',
      'America/Los_Angeles',
      'Australia/Adelaide',
      'Pacific/Chatham',
      'Pacific/Kiritimati',
      'Pacific/Pago_Pago'
    ]
    const from = '2026-03-27'
    const to = '2026-04-06'
    const moments = new Set<number>()
    for (const tz of zones) {
      for (
        let day = Date.parse(`${from}T00:00:00Z`) - 86_400_000;
        day <= Date.parse(`${to}T00:00:00Z`) + 2 * 86_400_000;
        day += 86_400_000
      ) {
        const midnight = zonedMidnight(new Date(day).toISOString().slice(0, 10), tz)
        for (const d of [-900_000, -1000, 0, 1000, 900_000]) moments.add(midnight + d)
      }
    }
    for (let at = Date.parse(`${from}T00:07:00Z`); at < Date.parse(`${to}T23:00:00Z`); at += 5 * 3_600_000 + 7 * 60_000)
      moments.add(at)
    const ats = [...moments].sort((a, b) => a - b)
    for (const [i, at] of ats.entries())
      await finishedRun(app, org, { at: new Date(at).toISOString(), engine: i % 2 === 0 ? 'echo' : 'openai' })
    for (const tz of zones) {
      const dayOf = (at: number) =>
        new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' }).format(at)
      const expected = new Map<string, number>()
      for (const [i, at] of ats.entries()) {
        const date = dayOf(at)
        if (date < from || date > to) continue
        const engine = i % 2 === 0 ? 'echo' : 'openai'
        expected.set(`${date}|${engine}`, (expected.get(`${date}|${engine}`) ?? 0) + 1)
        expected.set(date, (expected.get(date) ?? 0) + 1)
      }
      for (const groupBy of ['', 'engine']) {
        const res = await app.inject({
          method: 'GET',
          url: `/api/usage?from=${from}&to=${to}&tz=${tz}${groupBy === '' ? '' : `&groupBy=${groupBy}`}`,
          headers: { cookie: owner.cookie }
        })
        t.equal(res.statusCode, 200, res.body)
        const { buckets, totals } = res.json() as {
          buckets: Array<{ date: string; engine: string | null; runs: number }>
          totals: { runs: number }
        }
        const got = buckets.map((b) => [b.engine === null ? b.date : `${b.date}|${b.engine}`, b.runs])
        const want = got.map(([key]) => [key, expected.get(key as string) ?? 0])
        t.same(got, want, `${tz}${groupBy === '' ? '' : ' by engine'}: every run on its local day`)
        t.equal(
          totals.runs,
          [...expected.entries()].filter(([k]) => !k.includes('|')).reduce((s, [, n]) => s + n, 0),
          `${tz}: the totals`
        )
      }
    }
  }
)

/** The instant `date` begins in `tz` (the first instant whose local date is `date`). */
function zonedMidnight(date: string, tz: string): number {
  const dayOf = (at: number) =>
    new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' }).format(at)
  let lo = Date.parse(`${date}T00:00:00Z`) - 15 * 3_600_000
  let hi = lo + 30 * 3_600_000
  while (hi - lo > 1000) {
    // the first second whose local date is `date` (offsets are whole minutes)
    const mid = lo + Math.floor((hi - lo) / 2000) * 1000
    if (dayOf(mid) < date) lo = mid
    else hi = mid
  }
  return hi
}

t.test('groups are zero-filled for every day, ordered, and sum to the totals', async (t) => {
  const app = await buildPlatformApp(t)
  const owner = await signUpWithOrg(app)
  const org = owner.org.id
  const user = owner.user.id
  await finishedRun(app, org, { at: '2026-05-02T10:00:00Z', engine: 'echo', userId: user, tokens: [10, 20], ms: 1500 })
  await finishedRun(app, org, {
    at: '2026-05-02T11:00:00Z',
    engine: 'openai',
    model: 'gpt-x',
    status: 'failed',
    tokens: [5, 0],
    ms: 500
  })
  await finishedRun(app, org, {
    at: '2026-05-04T12:00:00Z',
    engine: 'openai',
    model: 'gpt-x',
    status: 'cancelled',
    ms: 0
  })
  const res = await app.inject({
    method: 'GET',
    url: '/api/usage?from=2026-05-01&to=2026-05-04&groupBy=engine,model,user',
    headers: { cookie: owner.cookie }
  })
  t.equal(res.statusCode, 200, res.body)
  const { buckets, totals } = res.json()
  t.equal(buckets.length, 8, '4 days × 2 groups')
  t.same(buckets.slice(2, 4), [
    {
      date: '2026-05-02',
      engine: 'echo',
      model: null,
      userId: user,
      runs: 1,
      succeeded: 1,
      failed: 0,
      inputTokens: 10,
      outputTokens: 20,
      durationMs: 1500
    },
    {
      date: '2026-05-02',
      engine: 'openai',
      model: 'gpt-x',
      userId: null,
      runs: 1,
      succeeded: 0,
      failed: 1,
      inputTokens: 5,
      outputTokens: 0,
      durationMs: 500
    }
  ])
  t.same(
    buckets[0],
    {
      date: '2026-05-01',
      engine: 'echo',
      model: null,
      userId: user,
      runs: 0,
      succeeded: 0,
      failed: 0,
      inputTokens: 0,
      outputTokens: 0,
      durationMs: 0
    },
    'a day without runs'
  )
  t.same(totals, { runs: 3, succeeded: 1, failed: 1, inputTokens: 15, outputTokens: 20, durationMs: 2000 })
  const empty = await app.inject({
    method: 'GET',
    url: '/api/usage?from=2025-01-01&to=2025-01-02&groupBy=user',
    headers: { cookie: owner.cookie }
  })
  t.same(
    empty.json().buckets.map((b: { date: string; userId: null; runs: number }) => [b.date, b.userId, b.runs]),
    [
      ['2025-01-01', null, 0],
      ['2025-01-02', null, 0]
    ],
    'no runs: a zero bucket per day'
  )
})

t.test('usage refuses bad ranges, zones and groups, and is for admins of their own org', async (t) => {
  const app = await buildPlatformApp(t)
  const owner = await signUpWithOrg(app)
  const other = await signUpWithOrg(app)
  await finishedRun(app, other.org.id, { at: '2026-06-01T12:00:00Z' })
  const get = (query: string, headers: Record<string, string> = { cookie: owner.cookie }) =>
    app.inject({ method: 'GET', url: `/api/usage?${query}`, headers })
  for (const query of [
    'from=2026-02-30&to=2026-03-01',
    'from=2026-03-02&to=2026-03-01',
    'from=2025-01-01&to=2026-01-02',
    'tz=Mars/Olympus',
    'tz=%2B02:00',
    'groupBy=team',
    'groupBy=engine,',
    'from=20260101',
    'limit=5',
    'to=2026-13-01'
  ]) {
    const res = await get(query)
    t.equal(res.statusCode, 400, query)
    t.equal(res.json().error, 'validation_failed', query)
  }
  t.equal((await get('from=2025-01-01&to=2026-01-01')).statusCode, 200, '366 days are allowed')
  const theirs = await get('from=2026-06-01&to=2026-06-01')
  t.equal(theirs.json().totals.runs, 0, "another org's runs are not counted")
  t.equal(
    (await get('from=2026-06-01&to=2026-06-01', { cookie: other.cookie })).json().totals.runs,
    1,
    'its own admin sees them'
  )

  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const asMember = await get('', { cookie: member.cookie, 'x-org-id': owner.org.id })
  t.equal(asMember.statusCode, 403, 'a member may not')
  const key = await mintKey(app, owner.cookie)
  t.equal(
    (await get('', { authorization: key.authorization })).statusCode,
    401,
    'nor an API key (off the allowlist: 401)'
  )
})
