// Runs at the speed of their SQL: the service next to pgbench running the very statements it
// sends, on the same Postgres database, one after the other and twice over (interleaved).
//
// The statements are read off the wire: an echo run's life is played once in this process
// (the real app over the bench's database, postgres.js's debug hook giving every statement and
// its parameters), and written out as pgbench scripts, each parameter a constant (its `:`s spelled
// chr(58), so that pgbench reads no variable in a JSON value), the run's id a fresh one per transaction
// and the claim's answer (\gset) the run the rest of the life works on.
//   dispatch: POST /api/runs (20 connections, no workers) ÷ pgbench of the dispatch's
//             statements, batched as the service batches them (the run, then run.queued),
//             with as many clients.
//   completion: echo runs drained per second by RUN_WORKER_CONCURRENCY=4 (and 16) from a
//             queue of DRAIN ÷ pgbench draining the same queue with as many clients, each
//             transaction what a worker sends for one run (claimed, recalled, ended), on the
//             run its claim took; both rates read off the runs' rows the same way (first
//             claim to last end). The queue is stored by the dispatch's statements for both,
//             so neither side's figure holds the dispatch. And 16 ÷ 4, for each.
//   memory search: GET /api/memory/search ÷ pgbench of the statement it sends.
//   round trips: the statements of one echo run's life.
// Needs BENCH_DATABASE_URL (or DATABASE_URL) and pgbench (PGBENCH, default the Postgres 15 one).
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { testConfig } from '../src/config.js'
import { openDatabase } from '../src/db/client.js'
import { migrateDatabase } from '../src/db/migrate.js'
import { benchPostgres, load, startServer, withDatabase } from './lib.js'
import { startRunsServer } from './runs.js'

const run = promisify(execFile)
const PGBENCH = process.env.PGBENCH ?? '/usr/lib/postgresql/15/bin/pgbench'
const SECONDS = Number(process.env.BENCH_SQL_SECONDS ?? 8)
const DRAIN = Number(process.env.BENCH_SQL_DRAIN ?? 3000)
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g

/**
 * pgbench's sessions as the service's: its connections run with JIT off (the claim's estimate
 * passes jit_above_cost once the runs table holds thousands of rows, and a session with JIT on
 * then compiled each claim for about a second: the second round's replay drained 11 runs/s).
 */
const PGBENCH_ENV = { ...process.env, PGOPTIONS: `${process.env.PGOPTIONS ?? ''} -c jit=off`.trim() }

/**
 * A function of the bench's database that runs a statement planned at that execution and
 * gives its first row's id: pgbench's `-M prepared` would plan the claim once per client,
 * while the service sends it unprepared (planned each time, so that its plan follows the
 * queue's size) and pays that planning for every claim.
 */
const PLANNED_EACH_TIME_FN = `
  create or replace function bench_planned_each_time(statement text) returns text language plpgsql as $$
  declare taken text;
  begin
    execute statement into taken;
    return taken;
  end $$`

/** Statements of other groups' pollers, which may run meanwhile. */
const ELSEWHERE = /\b(slack_\w+|knowledge_\w+|memory_captures|memory_items|mcp_servers|automations|blobs?|listen)\b/i

interface Statement {
  text: string
  params: readonly unknown[]
}

/** One echo run's life, statement by statement, played by the real app over `url`. */
export async function capture(
  url: string | undefined,
  embeddedDir?: string
): Promise<{ life: Statement[]; runId: string }> {
  const database = await openDatabase(url ? { url, poolMax: 4 } : { dataDir: embeddedDir })
  await migrateDatabase(database, url)
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-sql-'))
  const app = await buildApp({
    config: testConfig({
      ...(url ? { DATABASE_URL: url } : {}),
      DATA_DIR: dataDir,
      RUN_POLL_MS: '600000',
      RUN_SWEEP_MS: '600000',
      KNOWLEDGE_WORKER: 'false',
      MEMORY_CAPTURE_WORKER: 'false',
      // the queue the drains fill is larger than the default room of an org's queue
      RUN_QUEUE_MAX_PER_ORG: '100000'
    }),
    database
  })
  await app.ready()
  const one = async (record: Statement[] | null) => {
    let id = ''
    const stop = database.onStatement((text, params) => {
      if (record && !ELSEWHERE.test(text)) record.push({ text, params: [...params] })
    })
    const ended = new Promise<void>((resolve) => {
      const off = app.eventBus.subscribeAll((e) => {
        if (e.runId === id && e.type.startsWith('run.') && ['succeeded', 'failed'].includes(e.type.slice(4))) {
          stop()
          off()
          resolve()
        }
      })
    })
    const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'hello there world' } })
    id = (res.json() as { run: { id: string } }).run.id
    await ended
    return id
  }
  await one(null)
  const life: Statement[] = []
  const runId = await one(life)
  await app.close()
  await database.close().catch(() => {})
  rmSync(dataDir, { recursive: true, force: true })
  return { life, runId }
}

/**
 * Text as a constant of the script that the planner folds, as it uses a bound parameter's value:
 * quoted, each `:` spelled chr(58) so that pgbench reads no variable in it (a literal decoded by
 * convert_from, only stable, was evaluated again for every row a filter read).
 */
function constant(text: string): string {
  return `(${text
    .split(':')
    .map((part) => `'${part.replace(/'/g, "''")}'`)
    .join(' || chr(58) || ')})::text`
}

/**
 * The ids in a parameter's text that a replay gives fresh values: a new row's own id (a recall
 * frame's, `"id":"…"`), not the run's (the transaction's run) nor the org's, its user's or the
 * instance's, which stay.
 */
function ownIds(text: string, runId: string): string[] {
  return [...new Set(text.match(UUID) ?? [])].filter((found) => found !== runId && text.includes(`"id":"${found}"`))
}

/** A parameter as a literal of the script: the run's id as `id`, other ids fresh ones. */
function literal(value: unknown, runId: string, id: string): string {
  if (value === null || value === undefined) return 'null'
  if (typeof value === 'number' || typeof value === 'bigint') return String(value)
  if (typeof value === 'boolean') return String(value)
  const text = value instanceof Date ? value.toISOString() : String(value)
  let expr = constant(text)
  // (no run: the memory search's statement, whose replay keeps every value)
  if (runId && text.includes(runId)) expr = `replace(${expr}, '${runId}', ${id})`
  for (const found of ownIds(text, runId)) expr = `replace(${expr}, '${found}', gen_random_uuid()::text)`
  return `(${expr})`
}

/** One statement as a line of a pgbench script. */
function line(s: Statement, runId: string, id: string, gset = ''): string {
  const text = s.text
    .replace(/--[^\n]*/g, ' ')
    .replace(/\$(\d+)/g, (_, n: string) => literal(s.params[Number(n) - 1], runId, id))
    .replace(/\s+/g, ' ')
    .trim()
  return `${text}${gset ? `\n${gset}` : ';'}`
}

const fresh = `('00000000-0000-7000-8000-' || lpad(to_hex(:r::bigint), 12, '0'))`

/** Where a life's claim is among its statements: the dispatch's come before it. */
function claimIndex(life: Statement[]): number {
  const claimAt = life.findIndex((s) => s.text.includes('queued_orgs'))
  if (claimAt < 0) throw new Error('no claim among the statements of the life')
  return claimAt
}

export function scripts(life: Statement[], runId: string): { dispatch: string; life: string; work: string } {
  const claimAt = claimIndex(life)
  const before = life.slice(0, claimAt)
  const after = life.slice(claimAt + 1)
  const head = `\\set r random(1, 281474976710655)\n${before.map((s) => line(s, runId, fresh)).join('\n')}`
  // pgbench replays one run's life a transaction: its claim takes one run (the worker's took up to its free slots)
  const claim = { ...life[claimAt]!, text: life[claimAt]!.text.replace(/limit (?:\$\d+|\(\d+\))::int/g, 'limit 1') }
  // planned each time, as the service sends it: run by bench_planned_each_time, its first column the run's id
  const claimLine = `select bench_planned_each_time($claim$${line(claim, runId, fresh)}$claim$) as id\n\\gset c_`
  const work = `${claimLine}\n${after.map((s) => line(s, runId, ':c_id')).join('\n')}\n`
  return {
    dispatch: `${head}\n`,
    life: `${head}\n${work}`,
    // what a worker sends for a run already queued: the claim, the recall, the end
    work: `\\set r random(1, 281474976710655)\n${work}`
  }
}

async function pgbench(
  url: string,
  script: string,
  clients: number,
  length: { seconds: number } | { transactions: number }
): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-pgbench-'))
  const file = join(dir, 'script.sql')
  writeFileSync(file, script)
  try {
    const { stdout } = await run(
      PGBENCH,
      [
        '-n',
        '-M',
        'prepared',
        '-c',
        String(clients),
        '-j',
        String(Math.min(clients, 2)),
        ...('seconds' in length ? ['-T', String(length.seconds)] : ['-t', String(length.transactions)]),
        '-f',
        file,
        url
      ],
      { maxBuffer: 16 * 1024 * 1024, env: PGBENCH_ENV }
    )
    const failed = /number of failed transactions: (\d+)/.exec(stdout)?.[1]
    if (failed && failed !== '0') throw new Error(`pgbench: ${failed} failed transactions\n${stdout}`)
    const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)
    if (!tps) throw new Error(`pgbench said:\n${stdout}`)
    return Number(tps[1])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * A queue of DRAIN echo runs, stored and announced by the dispatch's own statements, every
 * earlier run ended first; `consume` then takes them, and the rate is the runs it ended per
 * second from its first claim to its last end (as the runs' rows say).
 */
async function drained(url: string, dispatchScript: string, consume: () => Promise<void>, spare = 0): Promise<number> {
  const admin = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await admin`update runs set status = 'succeeded', finished_at = now(), lease_owner = null where status <> 'succeeded'`
    const [{ since }] = (await admin`select now() as since`) as unknown as [{ since: Date }]
    await pgbench(url, dispatchScript, 4, { transactions: (DRAIN + spare) / 4 })
    await consume()
    const [rate] = await admin`
      select count(*) / extract(epoch from max(finished_at) - min(started_at))::float8 as rps
      from runs where started_at >= ${since} and status = 'succeeded'`
    return Math.round(Number(rate!.rps))
  } finally {
    await admin.end()
  }
}

/** Runs drained per second by `workers` workers of the service from a queue of DRAIN echo runs. */
async function drain(url: string, workers: number, dispatchScript: string): Promise<number> {
  const admin = postgres(url, { max: 1, onnotice: () => {} })
  try {
    return await drained(url, dispatchScript, async () => {
      const server = await startRunsServer({
        DATABASE_URL: url,
        RUN_WORKER_CONCURRENCY: String(workers),
        RUN_POLL_MS: '200',
        RUN_QUEUE_MAX_PER_ORG: '100000'
      })
      try {
        for (;;) {
          const [left] = await admin`select count(*)::int as n from runs where status in ('queued', 'running')`
          if (left!.n === 0) break
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
      } finally {
        await server.stop()
      }
    })
  } finally {
    await admin.end()
  }
}

/**
 * The same queue drained by pgbench with as many clients as workers, each transaction the
 * statements a worker sends for one run (its claim, recall and end, read off the wire), on
 * the run its claim took: every client on runs of its own, the queue's order and the org's
 * event lock as the service has them.
 */
async function replay(url: string, clients: number, dispatchScript: string, workScript: string): Promise<number> {
  const admin = postgres(url, { max: 1, onnotice: () => {} })
  await admin.unsafe(PLANNED_EACH_TIME_FN).finally(() => admin.end())
  // a few runs more than are taken, so that no claim ever finds the queue empty
  return drained(
    url,
    dispatchScript,
    async () => {
      await pgbench(url, workScript, clients, { transactions: Math.floor(DRAIN / clients) })
    },
    64
  )
}

const MEMORY_FACTS = Number(process.env.BENCH_SQL_FACTS ?? 10_000)
const SEARCHES: Array<[string, string]> = [
  ['two words', 'kubernetes deploy'],
  ['a misspelled word', 'kuberntes']
]

/**
 * Waits until the service's embedding worker has embedded the seeded facts (none left to take
 * in, none pending), or has embedded nothing for 10 s (no vectors here). The first
 * search measured while it worked read fewer vectors than its pgbench, measured after, and
 * shared the machine with the worker: two words came out at 1.35.
 */
async function embedded(url: string): Promise<void> {
  const admin = postgres(url, { max: 1, onnotice: () => {} })
  try {
    let last = -1
    let still = Date.now()
    for (;;) {
      const [row] = await admin`
        select (select count(*) from memory_items where not embedding_queued)
             + (select count(*) from embeddings where state = 'pending') as left`.catch(() => [{ left: 0 }])
      const left = Number(row!.left)
      if (left === 0 || Date.now() - still > 10_000) return
      if (left !== last) [last, still] = [left, Date.now()]
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  } finally {
    await admin.end()
  }
}

/**
 * A memory search next to its statement (read off the wire) in pgbench: GET
 * /api/memory/search from 4 connections, the search cache off, over MEMORY_FACTS facts,
 * against pgbench running the one statement it sends with 4 clients.
 */
async function memorySearch(url: string): Promise<string[]> {
  const env = {
    DATABASE_URL: url,
    BENCH_FACTS: String(MEMORY_FACTS),
    MEMORY_CAPTURE_WORKER: 'false',
    MEMORY_SEARCH_CACHE: '0'
  }
  const lines = [
    '',
    `Memory search, ${MEMORY_FACTS} facts, cache off, 4 connections and 4 pgbench clients:`,
    '',
    '| search | statements | GET /api/memory/search/s | pgbench tps | ratio |',
    '| --- | ---: | ---: | ---: | ---: |'
  ]
  // the server seeds the pool; the statements of a search are read off the wire in this process
  const server = await startServer('bench/memory-server.ts', env)
  try {
    await embedded(url)
    const database = await openDatabase({ url, poolMax: 2 })
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-sql-'))
    const app = await buildApp({
      config: testConfig({ ...env, DATA_DIR: dataDir, KNOWLEDGE_WORKER: 'false', RUN_WORKER_CONCURRENCY: '0' }),
      database
    })
    await app.ready()
    const said: Array<[string, string, Statement[]]> = []
    try {
      for (const [name, q] of SEARCHES) {
        const path = `/api/memory/search?q=${encodeURIComponent(q)}`
        await app.inject({ url: path })
        const seen: Statement[] = []
        const stop = database.onStatement((text, params) => {
          if (!ELSEWHERE.test(text.replace(/memory_items/g, ''))) seen.push({ text, params: [...params] })
        })
        const res = await app.inject({ url: path })
        stop()
        if (res.statusCode !== 200) throw new Error(`search: ${res.statusCode} ${res.body}`)
        said.push([name, path, seen])
      }
    } finally {
      await app.close()
      await database.close().catch(() => {})
      rmSync(dataDir, { recursive: true, force: true })
    }
    for (const [name, path, seen] of said) {
      const served = await load({ url: `${server.url}${path}`, name, connections: 4, seconds: SECONDS })
      // pgbench reads `:alpha` in a literal as a variable: the class is spelled with chr(58)
      const script = `${seen
        .map((st) => line(st, '', '').replace(/'\[\[:alpha:\]\]'/g, "('[[' || chr(58) || 'alpha' || chr(58) || ']]')"))
        .join('\n')}\n`
      if (process.env.BENCH_SQL_SCRIPTS)
        writeFileSync(join(process.env.BENCH_SQL_SCRIPTS, `memory-${name.replace(/\W+/g, '-')}.sql`), script)
      const direct = await pgbench(url, script, 4, { seconds: SECONDS })
      lines.push(
        `| ${name} (\`${path.split('q=')[1]}\`) | ${seen.length} | ${served.rps} | ${Math.round(direct)} | ${(served.rps / direct).toFixed(2)} |`
      )
    }
  } finally {
    await server.stop()
  }
  return lines
}

/** POST /api/runs from 20 connections for SECONDS on a service with its workers off (`env` names its database). */
async function dispatched(env: Record<string, string>, name: string) {
  const server = await startRunsServer({ ...env, RUN_WORKER_CONCURRENCY: '0', RUN_QUEUE_MAX_PER_ORG: '100000' })
  try {
    return await load({
      url: `${server.url}/api/runs`,
      name,
      method: 'POST',
      connections: 20,
      seconds: SECONDS,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'hello there world' })
    })
  } finally {
    await server.stop()
  }
}

/** A statement's parameters for another run: `runId` becomes `id`, a new row's own id a fresh one. */
function paramsFor(params: readonly unknown[], runId: string, id: string): unknown[] {
  return params.map((value) => {
    if (typeof value !== 'string') return value
    let text = value.replaceAll(runId, id)
    for (const found of ownIds(value, runId)) text = text.replaceAll(found, randomUUID())
    return text
  })
}

/**
 * On the embedded database (PGlite, the default): POST /api/runs from 20 connections, workers
 * off, against the dispatch's own statements (read off the wire there) sent straight to an
 * embedded database of the same schema through the service's database client, by 20 loops at
 * once, each the run then its `run.queued`, a fresh run id each time. PGlite has one session:
 * both sides' statements queue on it.
 */
async function embeddedDispatch(): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-sql-embedded-'))
  const lines = [
    '',
    "On the embedded database (PGlite): POST /api/runs, 20 connections, workers off, against the dispatch's statements sent directly by 20 loops:",
    '',
    '| round | POST /api/runs/s | its statements, dispatches/s | ratio |',
    '| --- | ---: | ---: | ---: |'
  ]
  try {
    const { life, runId } = await capture(undefined, join(dir, 'capture'))
    const statements = life.slice(0, claimIndex(life))
    for (let round = 1; round <= 2; round++) {
      const posted = await dispatched({}, 'POST /api/runs (PGlite)')
      // a database of the schema with the org and user the captured run belongs to, as the
      // service's has them: one echo run's life played there first
      await capture(undefined, join(dir, `direct-${round}`))
      const database = await openDatabase({ dataDir: join(dir, `direct-${round}`) })
      let done = 0
      try {
        const client = (database.db as unknown as { $client: postgres.Sql }).$client
        const until = Date.now() + SECONDS * 1000
        const loop = async () => {
          while (Date.now() < until) {
            const id = randomUUID()
            for (const st of statements) await client.unsafe(st.text, paramsFor(st.params, runId, id) as never[])
            done++
          }
        }
        await Promise.all(Array.from({ length: 20 }, loop))
      } finally {
        await database.close().catch(() => {})
      }
      const direct = done / SECONDS
      lines.push(`| ${round} | ${posted.rps} | ${Math.round(direct)} | ${(posted.rps / direct).toFixed(2)} |`)
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  return lines
}

export async function benchSqlSpeed(): Promise<string> {
  if (!benchPostgres)
    return ['Postgres: skipped, needs BENCH_DATABASE_URL or DATABASE_URL', ...(await embeddedDispatch())].join('\n')
  return withDatabase(benchPostgres, async (url) => {
    // BENCH_SQL_ONLY=memory: the memory search part alone (a short look at one statement)
    if (process.env.BENCH_SQL_ONLY === 'memory') return (await memorySearch(url)).join('\n')
    const { life, runId } = await capture(url)
    const { dispatch, life: lifeScript, work } = scripts(life, runId)
    if (process.env.BENCH_SQL_SCRIPTS) {
      writeFileSync(join(process.env.BENCH_SQL_SCRIPTS, 'dispatch.sql'), dispatch)
      writeFileSync(join(process.env.BENCH_SQL_SCRIPTS, 'life.sql'), lifeScript)
      writeFileSync(join(process.env.BENCH_SQL_SCRIPTS, 'work.sql'), work)
    }
    const lines = [
      `An echo run's life: ${life.length} statements (${life.map((s) => s.text.trim().split(/\s+/).slice(0, 3).join(' ')).join(' | ')})`,
      '',
      '| round | POST /api/runs/s | pgbench dispatch tps | ratio | drained/s, 4 workers | pgbench drained/s, 4 clients | ratio | drained/s, 16 workers | pgbench drained/s, 16 clients | ratio | service 16 ÷ 4 | pgbench 16 ÷ 4 |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    ]
    for (let round = 1; round <= 2; round++) {
      const posted = await dispatched({ DATABASE_URL: url }, 'POST /api/runs')
      const batched = await pgbench(url, dispatch, 20, { seconds: SECONDS })
      const four = await drain(url, 4, dispatch)
      const direct4 = await replay(url, 4, dispatch, work)
      const sixteen = await drain(url, 16, dispatch)
      const direct16 = await replay(url, 16, dispatch, work)
      lines.push(
        `| ${round} | ${posted.rps} | ${Math.round(batched)} | ${(posted.rps / batched).toFixed(2)} | ${four} | ${direct4} | ${(four / direct4).toFixed(2)} | ${sixteen} | ${direct16} | ${(sixteen / direct16).toFixed(2)} | ${(sixteen / four).toFixed(2)} | ${(direct16 / direct4).toFixed(2)} |`
      )
      if (posted.non2xx > 0 || posted.errors > 0)
        lines.push(`(round ${round}: ${posted.non2xx} non-2xx, ${posted.errors} errors)`)
    }
    if (process.env.BENCH_SQL_EMBEDDED !== 'false')
      lines.push(
        ...(await embeddedDispatch().catch((err: unknown) => ['', `embedded dispatch: failed: ${String(err)}`]))
      )
    if (process.env.BENCH_SQL_MEMORY !== 'false')
      lines.push(...(await memorySearch(url).catch((err: unknown) => ['', `memory search: failed: ${String(err)}`])))
    return lines.join('\n')
  })
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await benchSqlSpeed())
}
