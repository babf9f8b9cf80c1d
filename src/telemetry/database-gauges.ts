import { sql } from 'drizzle-orm'
import { Gauge, Registry } from 'prom-client'
import { rowsOf, withinTime, type Database } from '../db/client.js'

/** A scrape never waits longer than this for the database: its gauges are left out instead. */
const COUNT_TIMEOUT_MS = 2000
/** Counts this fresh serve the scrape that asked and any other within it (far below any scrape interval). */
const REUSE_MS = 250

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

/**
 * An app's gauges that come from its database and its pool. A scrape costs one statement
 * (a collect callback per gauge; concurrent scrapes, and those within REUSE_MS, share it); a
 * database that does not answer in time leaves its gauges out of that scrape rather than
 * failing it.
 */
export function databaseGauges(database: Database, perOrg: boolean, onError: (err: unknown) => void): Registry {
  const registry = new Registry()
  const registers = [registry]
  let inFlight: Promise<CountRow[] | null> | null = null
  let last: { at: number; rows: CountRow[] } | null = null
  const counts = (): Promise<CountRow[] | null> => {
    // prom-client collects the gauges one after another: the first asks, the others of the scrape reuse it
    if (last && performance.now() - last.at < REUSE_MS) return Promise.resolve(last.rows)
    return (inFlight ??= withinTime(database.db.execute(countsQuery(perOrg)), COUNT_TIMEOUT_MS)
      .then((result) => {
        const rows = rowsOf<CountRow>(result)
        last = { at: performance.now(), rows }
        return rows
      })
      .catch((err: unknown) => {
        onError(err)
        return null
      })
      .finally(() => {
        inFlight = null
      }))
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
  return registry
}
