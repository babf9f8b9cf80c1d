import { sql } from 'drizzle-orm'
import { Gauge, Registry } from 'prom-client'
import { rowsOf, withinTime, type Database } from '../db/client.js'
import { systemTimers, type LoopTimers } from '../worker-loop.js'

/** A scrape never waits longer than this for the database: its gauges are left out instead. */
const COUNT_TIMEOUT_MS = 2000
/** While someone scrapes, the counts are read again this often, ahead of the scrapes rather than on their path. */
export const COUNTS_REFRESH_MS = 1000
/** A scrape never shows counts older than this: it reads them itself (the first scrape, one after a pause). */
export const COUNTS_MAX_AGE_MS = 3000
/** Reading ahead stops when nobody scraped for this long (longer than any usual scrape interval). */
export const COUNTS_WATCHED_MS = 5 * 60_000

/** Where the gauges read the time (milliseconds) and wait: the system's, or a test's. */
export interface GaugeTime {
  now(): number
  timers: LoopTimers
}
const systemTime: GaugeTime = { now: () => performance.now(), timers: systemTimers }

interface CountRow {
  what: string
  org_id: string | null
  n: number | string
}

/**
 * The database's backlog in one statement: runs by live state, approvals waiting, and the
 * capture outbox's pending, delivering and dead rows. Every count reads a partial index of
 * those states only (runs_queued_idx, runs_running_lease_idx, runs_waiting_idx,
 * tool_approvals_pending_idx, memory_captures_due_idx, _lease_idx, _dead_idx), so a scrape
 * costs the same with ten rows or millions of finished ones. Per org, the same grouped.
 */
function countsQuery(perOrg: boolean) {
  const org = perOrg ? sql.raw('org_id') : sql.raw('null::text')
  const group = perOrg ? sql.raw('group by org_id') : sql.raw('')
  return sql`
    select 'queued' as what, ${org} as org_id, count(*) as n from runs where status = 'queued' ${group}
    union all select 'running', ${org}, count(*) from runs where status = 'running' ${group}
    union all select 'requires_action', ${org}, count(*) from runs where status = 'requires_action' ${group}
    union all select 'approvals_pending', ${org}, count(*) from tool_approvals where status = 'pending' ${group}
    union all select 'capture_pending', ${org}, count(*) from memory_captures where state = 'pending' ${group}
    union all select 'capture_delivering', ${org}, count(*) from memory_captures where state = 'delivering' ${group}
    union all select 'capture_dead', ${org}, count(*) from memory_captures where state = 'dead' ${group}`
}

const QUEUE_STATES = ['queued', 'running', 'requires_action'] as const
const CAPTURE_STATES = ['pending', 'delivering', 'dead'] as const

export interface DatabaseGauges {
  registry: Registry
  /** reads nothing more (the app is closing) */
  stop(): void
}

/**
 * An app's gauges that come from its database and its pool. The backlog counts are one
 * statement, read ahead every COUNTS_REFRESH_MS while someone scrapes (so a scrape costs no
 * query), and never shown older than COUNTS_MAX_AGE_MS: a scrape that finds them older (the
 * first one, or one after a pause) reads them itself, concurrent ones sharing the statement. A
 * database that does not answer in time leaves those gauges out of that scrape rather than
 * failing it.
 */
export function databaseGauges(
  database: Database,
  perOrg: boolean,
  onError: (err: unknown) => void,
  time: GaugeTime = systemTime
): DatabaseGauges {
  const registry = new Registry()
  const registers = [registry]
  let inFlight: Promise<CountRow[] | null> | null = null
  let last: { at: number; rows: CountRow[] } | null = null
  let scrapedAt = -Infinity
  let ahead: unknown = null
  let ticking = false
  let stopped = false

  /** One count statement (shared by whoever asks while it runs); null when it failed. */
  const read = (report: boolean): Promise<CountRow[] | null> =>
    (inFlight ??= (async () => {
      const at = time.now()
      try {
        const rows = rowsOf<CountRow>(await withinTime(database.db.execute(countsQuery(perOrg)), COUNT_TIMEOUT_MS))
        last = { at, rows }
        return rows
      } catch (err) {
        // a failed read ahead is not logged: the scrape that then finds old counts reads, and says so
        if (report) onError(err)
        return null
      } finally {
        inFlight = null
      }
    })())

  const tick = async () => {
    ahead = null
    if (stopped || time.now() - scrapedAt > COUNTS_WATCHED_MS) return
    ticking = true
    await read(false)
    ticking = false
    if (!stopped && ahead === null) ahead = time.timers.setTimeout(() => void tick(), COUNTS_REFRESH_MS)
  }

  const counts = async (): Promise<CountRow[] | null> => {
    scrapedAt = time.now()
    if (!stopped && ahead === null && !ticking) ahead = time.timers.setTimeout(() => void tick(), COUNTS_REFRESH_MS)
    // prom-client collects the gauges one after another: the first may read, the others of the scrape reuse it
    if (last && time.now() - last.at <= COUNTS_MAX_AGE_MS) return last.rows
    return read(true)
  }
  const labelsOf = (row: CountRow, labels: Record<string, string>) =>
    perOrg && row.org_id !== null ? { ...labels, org: row.org_id } : labels

  /**
   * A gauge of some of the count statement's rows: `series` maps each row kind (`what`) to its labels. Every
   * series is 0 until counted (per org, only the orgs that have rows appear).
   */
  const backlogGauge = (
    name: string,
    help: string,
    stateLabel: boolean,
    series: Array<[string, Record<string, string>]>
  ) => {
    const labelsOfWhat = new Map(series)
    const base = stateLabel ? ['state'] : []
    new Gauge({
      name,
      help,
      labelNames: perOrg ? [...base, 'org'] : base,
      registers,
      async collect() {
        this.reset()
        const rows = await counts()
        if (!rows) return
        if (!perOrg) for (const labels of labelsOfWhat.values()) this.set(labels, 0)
        for (const row of rows) {
          const labels = labelsOfWhat.get(row.what)
          if (labels) this.set(labelsOf(row, labels), Number(row.n))
        }
      }
    })
  }
  backlogGauge(
    'cairn_run_queue_depth',
    'Runs by live state across every instance (queued, running, requires_action: waiting for people)',
    true,
    QUEUE_STATES.map((state) => [state, { state }])
  )
  backlogGauge(
    'cairn_approvals_pending',
    'Tool calls waiting for a person to approve or deny them, across every instance',
    false,
    [['approvals_pending', {}]]
  )
  backlogGauge(
    'cairn_memory_capture_outbox',
    "The memory capture outbox's rows not yet delivered, by state (pending, delivering, dead: given up)",
    true,
    CAPTURE_STATES.map((state) => [`capture_${state}`, { state }])
  )
  new Gauge({
    name: 'cairn_db_pool_connections',
    help: "This instance's database connections by state (in_use: carrying queries; open; max: the pool's size)",
    labelNames: ['state'],
    registers,
    collect() {
      const { open, inUse, max } = database.connections()
      this.set({ state: 'in_use' }, inUse)
      this.set({ state: 'open' }, open)
      this.set({ state: 'max' }, max)
    }
  })
  return {
    registry,
    stop() {
      stopped = true
      if (ahead !== null) time.timers.clearTimeout(ahead)
      ahead = null
    }
  }
}
