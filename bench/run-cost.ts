// What one echo run costs the database: statements (pg_stat_statements), transactions and
// rows, counted on a Postgres cluster of the bench's own (initdb, like the restart test) so
// nothing else's statements mix in. Two cases: runs one at a time (accepted, executed and
// waited for by one client; the worst case, nothing shared) and a burst of runs accepted by
// 20 clients and executed meanwhile (events and claims shared). The statements the instance
// makes while idle (pollers, sweepers, lease renewals) are measured first and taken off at
// their rate. Needs the Postgres 15 server binaries (PG_BIN), as the restart test does.
import { randomUUID } from 'node:crypto'
import postgres from 'postgres'
import { clusterSkip, startCluster } from '../test/db/cluster.js'
import { startRunsServer } from './runs.js'
import { now } from './model.js'

const SEQUENTIAL = Number(process.env.BENCH_RUN_COST_RUNS ?? 100)
const BURST = Number(process.env.BENCH_RUN_COST_BURST ?? 1000)
const IDLE_MS = 5000

interface Totals {
  statements: number
  commits: number
  inserted: number
  updated: number
  deleted: number
  wal: number
}
interface StatementRow {
  query: string
  calls: number
}

async function post(url: string): Promise<string> {
  const res = await fetch(`${url}/api/runs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() },
    body: JSON.stringify({ prompt: 'bench run' })
  })
  if (res.status !== 201) throw new Error(`POST /api/runs: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { run: { id: string } }).run.id
}

async function ended(url: string, id: string): Promise<void> {
  for (;;) {
    const run = ((await (await fetch(`${url}/api/runs/${id}?wait=30`)).json()) as { run: { status: string } }).run
    if (run.status === 'succeeded') return
    if (['failed', 'cancelled'].includes(run.status)) throw new Error(`run ${id} ${run.status}`)
  }
}

export async function benchRunCost(): Promise<string> {
  if (clusterSkip) return `skipped: ${clusterSkip}`
  const teardowns: Array<() => unknown> = []
  try {
    const cluster = await startCluster({ teardown: (fn) => void teardowns.unshift(fn) }, [
      'shared_preload_libraries=pg_stat_statements',
      'pg_stat_statements.track=top',
      'pg_stat_statements.track_utility=on',
      'pg_stat_statements.max=10000'
    ])
    const admin = postgres(cluster.url, { max: 1, onnotice: () => {} })
    teardowns.unshift(() => admin.end())
    await admin`create extension pg_stat_statements`
    await admin`create database cost`
    const dbUrl = cluster.url.replace(/\/postgres$/, '/cost')
    // pg_stat_reset() resets the counters of the database it is called in: this one's
    const costAdmin = postgres(dbUrl, { max: 1, onnotice: () => {} })
    teardowns.unshift(() => costAdmin.end())
    // the instance's pollers and sweepers slowed down, so what is counted is the runs' own (NOTIFY wakes the workers)
    const quiet = {
      RUN_POLL_MS: '600000',
      RUN_SWEEP_MS: '600000',
      MEMORY_CAPTURE_POLL_MS: '60000',
      BLOB_SWEEP_MS: '600000',
      KNOWLEDGE_POLL_MS: '600000',
      SCHEDULER_POLL_MS: '60000',
      SLACK_OUTBOX_POLL_MS: '600000'
    }
    const server = await startRunsServer({ DATABASE_URL: dbUrl, LOG_LEVEL: 'warn', ...quiet })
    teardowns.unshift(() => server.stop())

    // the WAL position at the last reset (the cluster's WAL is counted from there)
    let walStart = 0
    const totals = async (): Promise<Totals> => {
      const [s] = await admin`select coalesce(sum(calls), 0)::bigint as n from pg_stat_statements
        where dbid = (select oid from pg_database where datname = 'cost')`
      const [d] =
        await admin`select xact_commit, tup_inserted, tup_updated, tup_deleted, pg_current_wal_lsn() - '0/0'::pg_lsn as wal
        from pg_stat_database where datname = 'cost'`
      return {
        statements: Number(s!.n),
        commits: Number(d!.xact_commit),
        inserted: Number(d!.tup_inserted),
        updated: Number(d!.tup_updated),
        deleted: Number(d!.tup_deleted),
        wal: Number(d!.wal) - walStart
      }
    }
    const statements = async (): Promise<StatementRow[]> =>
      (await admin`
      select regexp_replace(query, '\\s+', ' ', 'g') as query, calls::int as calls from pg_stat_statements
      where dbid = (select oid from pg_database where datname = 'cost') order by calls desc`) as unknown as StatementRow[]
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
    // A backend sends its counts to pg_stat_database at most once a second and, when it is idle
    // with counts not sent, 10 s later (Postgres 15's PGSTAT_IDLE_INTERVAL): what the service
    // did is all there only 10 s after it went idle. (pg_stat_statements counts at once.)
    const flushed = () => sleep(11_000)
    const reset = async () => {
      await costAdmin`select pg_stat_reset()`
      await admin`select pg_stat_statements_reset()`
      const [w] = await admin`select pg_current_wal_lsn() - '0/0'::pg_lsn as wal`
      walStart = Number(w!.wal)
    }
    const settle = () => sleep(1200)

    // the service finishes starting, then: what it does on its own, per second
    await settle()
    await flushed()
    await reset()
    const idleStart = now()
    await sleep(IDLE_MS)
    await flushed()
    const idle = await totals()
    const idleRate = (v: number) => v / (now() - idleStart)

    const measure = async (label: string, runs: number, go: () => Promise<void>) => {
      await reset()
      const started = now()
      await go()
      await settle()
      await flushed()
      const t = await totals()
      const ms = now() - started
      const per = (v: number, idleV: number) => ((v - idleRate(idleV) * ms) / runs).toFixed(1)
      return {
        row: `| ${label} | ${runs} | ${per(t.statements, idle.statements)} | ${per(t.commits, idle.commits)} | ${per(t.inserted, idle.inserted)} | ${per(t.updated, idle.updated)} | ${per(t.deleted, idle.deleted)} | ${(Number(per(t.wal, idle.wal)) / 1024).toFixed(1)} |`,
        top: await statements()
      }
    }

    const one = await measure('one at a time (POST, then GET ?wait until it ends)', SEQUENTIAL, async () => {
      for (let i = 0; i < SEQUENTIAL; i++) await ended(server.url, await post(server.url))
    })
    const burst = await measure('a burst from 20 clients, executed meanwhile', BURST, async () => {
      const ids: string[] = []
      let next = 0
      await Promise.all(
        Array.from({ length: 20 }, async () => {
          while (next < BURST) {
            next++
            ids.push(await post(server.url))
          }
        })
      )
      for (const id of ids) await ended(server.url, id)
    })
    const lines = [
      `Statements, commits and rows per echo run on Postgres 15 (the bench's own cluster, the instance's pollers slowed down; its own statements while idle, ${idle.statements} in ${IDLE_MS / 1000} s, and commits, ${idle.commits}, taken off at their rate; a statement is a round trip):`,
      '',
      '| case | runs | statements | commits | rows inserted | rows updated | rows deleted | WAL KiB |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      one.row,
      burst.row,
      '',
      'Statements of the one-at-a-time case, calls per run (those at 0.2 or more):',
      '',
      '| calls per run | statement |',
      '| ---: | --- |',
      ...one.top
        .filter((s) => s.calls / SEQUENTIAL >= 0.2)
        .map((s) => `| ${(s.calls / SEQUENTIAL).toFixed(2)} | \`${s.query.slice(0, 200).replace(/\|/g, '\\|')}\` |`)
    ]
    return lines.join('\n')
  } finally {
    for (const fn of teardowns) await fn()
  }
}
