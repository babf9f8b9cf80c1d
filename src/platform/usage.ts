import { sql } from 'drizzle-orm'
import { validationFailed } from '../../plugins/errors.js'
import { USAGE_GROUPS, USAGE_MAX_DAYS } from '../../schemas/platform.js'
import { isTimeZone } from '../automations/cron.js'
import { rowsOf, type Db } from '../db/client.js'
import { sqlStateOf } from '../db/faults.js'

type Group = (typeof USAGE_GROUPS)[number]
const COUNTS = ['runs', 'succeeded', 'failed', 'inputTokens', 'outputTokens', 'durationMs'] as const
type Counts = Record<(typeof COUNTS)[number], number>

export interface UsageBucket extends Counts {
  date: string
  engine: string | null
  model: string | null
  userId: string | null
}

const DAY_MS = 86_400_000
const zero = (): Counts => ({ runs: 0, succeeded: 0, failed: 0, inputTokens: 0, outputTokens: 0, durationMs: 0 })

/** Days since 1970-01-01 of a real calendar date, or null (2026-02-30 is none). */
function dayNumber(date: string): number | null {
  const [y, m, d] = date.split('-').map(Number) as [number, number, number]
  const ms = Date.UTC(y, m - 1, d)
  const back = new Date(ms)
  if (back.getUTCFullYear() !== y || back.getUTCMonth() !== m - 1 || back.getUTCDate() !== d) return null
  return ms / DAY_MS
}
const dateOfDay = (day: number) => new Date(day * DAY_MS).toISOString().slice(0, 10)

/** Today's date in `tz` (en-CA formats as YYYY-MM-DD). */
const todayIn = (tz: string, now: Date) =>
  new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' }).format(now)

export interface UsageQuery {
  from?: string | undefined
  to?: string | undefined
  tz?: string | undefined
  groupBy?: string | undefined
}

/** The query's days and groups, or 400 validation_failed naming what is wrong. */
export function parseUsageQuery(
  q: UsageQuery,
  now: Date
): { first: number; last: number; tz: string; groups: Group[] } {
  const tz = q.tz ?? 'UTC'
  if (!isTimeZone(tz))
    throw validationFailed([
      { path: '/querystring/tz', message: `${JSON.stringify(tz)} is not an IANA time zone (like Europe/Berlin or UTC)` }
    ])
  const to = q.to ?? todayIn(tz, now)
  const last = dayNumber(to)
  if (last === null) throw validationFailed([{ path: '/querystring/to', message: `${to} is not a date` }])
  const first = q.from === undefined ? last - 29 : dayNumber(q.from)
  if (first === null) throw validationFailed([{ path: '/querystring/from', message: `${q.from} is not a date` }])
  if (first > last) throw validationFailed([{ path: '/querystring/from', message: 'must not be after `to`' }])
  if (last - first + 1 > USAGE_MAX_DAYS) {
    throw validationFailed([
      { path: '/querystring/to', message: `the range is ${last - first + 1} days; at most ${USAGE_MAX_DAYS}` }
    ])
  }
  const groups = [...new Set((q.groupBy ?? '').split(',').filter((g) => g !== ''))] as Group[]
  return { first, last, tz, groups: USAGE_GROUPS.filter((g) => groups.includes(g)) }
}

const COLUMN: Record<Group, string> = { engine: 'engine', model: 'model', user: 'user_id' }
/** The rollup's origin for date_bin (any whole UTC hour: it bins the same in every session time zone). */
const ORIGIN = '2000-01-01T00:00:00Z'

/**
 * Fleet usage from the rollup (src/platform/tables.ts): the local midnights
 * from `first` to the one ending `last` are converted once each; every whole UTC hour
 * between them that no midnight splits is read from the hourly table, and the quarter
 * hours of the hours one does split (zones like +05:30) from the quarter-hour table; each
 * row's local day is a binary search among the midnights (width_bucket). Then every day of
 * every group seen is there, zero-filled, in date then group order, and the totals are the
 * buckets' sums.
 */
export async function usageReport(
  db: Db,
  orgId: string,
  { first, last, tz, groups }: ReturnType<typeof parseUsageQuery>
): Promise<{ buckets: UsageBucket[]; totals: Counts }> {
  const keys = groups.map((g) => sql.raw(COLUMN[g]))
  const columns = keys.length > 0 ? sql`, ${sql.join(keys, sql`, `)}` : sql``
  const hours = sql.raw(keys.length > 0 ? 'usage_hour_groups' : 'usage_hours')
  const rows = rowsOf<Record<string, unknown>>(
    await db
      .execute(
        sql`
    with midnights as materialized (
      select i, m, date_bin('1 hour', m, ${ORIGIN}::timestamptz) as h
      from (select i, ((${dateOfDay(first)}::date + i)::timestamp at time zone ${tz}) as m
            from generate_series(0, ${last - first + 1}::int) i) x),
    bounds as materialized (
      select array_agg(m order by i) as b,
             coalesce(array_agg(h) filter (where m <> h), '{}') as split
      from midnights)
    select day${columns},
           sum(runs)::bigint as runs, sum(succeeded)::bigint as succeeded, sum(failed)::bigint as failed,
           sum(input_tokens)::bigint as input_tokens, sum(output_tokens)::bigint as output_tokens, sum(duration_ms)::bigint as duration_ms
    from (
      select width_bucket(hour, (select b from bounds)) - 1 as day${columns}, runs, succeeded, failed, input_tokens, output_tokens, duration_ms
      from ${hours}
      where org_id = ${orgId}
        and hour >= (select b[1] from bounds)
        and hour < (select b[array_length(b, 1)] from bounds)
        and hour <> all ((select split from bounds)::timestamptz[])
      union all
      select width_bucket(q.slot, (select b from bounds)) - 1${columns}, runs, succeeded, failed, input_tokens, output_tokens, duration_ms
      from unnest((select split from bounds)) h
      -- lateral, with the hour and the range in one bound each: an index range per split hour
      cross join lateral (
        select * from usage_slot_groups q
        where q.org_id = ${orgId}
          and q.slot >= greatest(h, (select b[1] from bounds))
          and q.slot < least(h + interval '1 hour', (select b[array_length(b, 1)] from bounds))) q
    ) r
    group by 1${columns}`
      )
      .catch((err: unknown) => {
        // a zone ICU knows and this database's time zone data does not
        if (sqlStateOf(err) === '22023')
          throw validationFailed([
            { path: '/querystring/tz', message: `${JSON.stringify(tz)} is not a time zone this database knows` }
          ])
        throw err
      })
  )
  const label = (r: Record<string, unknown>) => ({
    engine: groups.includes('engine') ? String(r.engine) : null,
    model: groups.includes('model') && r.model !== '' ? String(r.model) : null,
    userId: groups.includes('user') && r.user_id !== '' ? String(r.user_id) : null
  })
  const keyOf = (l: ReturnType<typeof label>) => JSON.stringify([l.engine, l.model, l.userId])
  const byKey = new Map<string, Counts>()
  const seen = new Map<string, ReturnType<typeof label>>()
  for (const r of rows) {
    const l = label(r)
    const k = keyOf(l)
    seen.set(k, l)
    byKey.set(`${dateOfDay(first + Number(r.day))}|${k}`, {
      runs: Number(r.runs),
      succeeded: Number(r.succeeded),
      failed: Number(r.failed),
      inputTokens: Number(r.input_tokens),
      outputTokens: Number(r.output_tokens),
      durationMs: Number(r.duration_ms)
    })
  }
  if (seen.size === 0)
    seen.set(keyOf({ engine: null, model: null, userId: null }), { engine: null, model: null, userId: null })
  const order = [...seen.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  const buckets: UsageBucket[] = []
  const totals = zero()
  for (let day = first; day <= last; day++) {
    const date = dateOfDay(day)
    for (const [k, l] of order) {
      const counts = byKey.get(`${date}|${k}`) ?? zero()
      for (const c of COUNTS) totals[c] += counts[c]
      buckets.push({ date, ...l, ...counts })
    }
  }
  return { buckets, totals }
}
