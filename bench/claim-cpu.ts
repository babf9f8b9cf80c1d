// The main thread's CPU time per run claim: the claim's text built by drizzle for each claim
// (as claimRuns once did) against the text built once with placeholders (claimRuns now), in
// one process on one Postgres queue, claim by claim alternately, so that load on the machine
// and the queue's size weigh on both the same. CPU is process.cpuUsage() (user + system)
// around each claim, from sending it to its rows; the process does nothing else meanwhile.
// Needs BENCH_DATABASE_URL (or DATABASE_URL).
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { buildApp } from '../src/app.js'
import { testConfig } from '../src/config.js'
import { openDatabase, rowsOf, type Db } from '../src/db/client.js'
import { migrateDatabase } from '../src/db/migrate.js'
import { claimStatement, sendClaim, type ClaimValues } from '../src/runs/runs-repo.js'
import { benchPostgres, median, withDatabase } from './lib.js'

/** claims of each kind (each takes one run; as many runs are queued, and claims on an empty queue after) */
const CLAIMS = Number(process.env.BENCH_CLAIMS ?? 300)

interface Tally {
  cpuUs: number[]
  systemUs: number[]
  wallMs: number[]
}

const tally = (): Tally => ({ cpuUs: [], systemUs: [], wallMs: [] })

async function timed(t: Tally, claim: () => Promise<unknown>): Promise<void> {
  const wall = performance.now()
  const cpu = process.cpuUsage()
  await claim()
  const used = process.cpuUsage(cpu)
  t.cpuUs.push(used.user + used.system)
  t.systemUs.push(used.system)
  t.wallMs.push(performance.now() - wall)
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length)

function row(name: string, t: Tally): string {
  return `| ${name} | ${t.cpuUs.length} | ${Math.round(mean(t.cpuUs))} | ${Math.round(median(t.cpuUs))} | ${Math.round(mean(t.systemUs))} | ${median(t.wallMs).toFixed(2)} |`
}

export async function benchClaimCpu(): Promise<string> {
  if (!benchPostgres) return 'claim CPU: skipped, needs BENCH_DATABASE_URL or DATABASE_URL'
  return withDatabase(benchPostgres, async (url) => {
    const database = await openDatabase({ url, poolMax: 4 })
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-claim-'))
    try {
      await migrateDatabase(database, url)
      const app = await buildApp({
        config: testConfig({
          DATABASE_URL: url,
          DATA_DIR: dataDir,
          RUN_WORKER_CONCURRENCY: '0',
          KNOWLEDGE_WORKER: 'false',
          MEMORY_CAPTURE_WORKER: 'false',
          RUN_QUEUE_MAX_PER_ORG: '100000'
        }),
        database
      })
      await app.ready()
      const db = app.db as Db
      try {
        for (let i = 0; i < 2 * CLAIMS; i++) {
          const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: `hello ${i}` } })
          if (res.statusCode !== 201 && res.statusCode !== 202) throw new Error(`POST /api/runs: ${res.statusCode}`)
        }
        // a run is claimable once its run.queued is stored (written just after the run commits)
        for (;;) {
          const [stored] = rowsOf<{ n: number }>(
            await db.execute(sql`select count(*)::int as n from run_events where type = 'run.queued'`)
          )
          if (stored!.n >= 2 * CLAIMS) break
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
        const values: ClaimValues = { limit: 1, instanceId: 'bench-claim-cpu', leaseSeconds: 60, budgetBytes: 256_000 }
        const [built, once, builtEmpty, onceEmpty] = [tally(), tally(), tally(), tally()]
        const rebuilt = async () => rowsOf(await db.execute(claimStatement(values)))
        // a few of each first: the JIT compiles both paths before anything is counted
        for (let i = 0; i < 10; i++) {
          await rebuilt()
          await sendClaim(db, values)
        }
        for (let i = 0; i < CLAIMS - 10; i++) {
          await timed(built, rebuilt)
          await timed(once, () => sendClaim(db, values))
        }
        // the queue is empty now: what a claim costs that finds nothing
        for (let i = 0; i < CLAIMS; i++) {
          await timed(builtEmpty, rebuilt)
          await timed(onceEmpty, () => sendClaim(db, values))
        }
        return [
          `Node CPU per run claim (limit 1), alternately, ${CLAIMS - 10} claims each taking a run and ${CLAIMS} finding none:`,
          '',
          '| claim | claims | CPU µs mean | CPU µs median | of which system (kernel) µs mean | wall ms median |',
          '| --- | ---: | ---: | ---: | ---: | ---: |',
          row('text built each claim, a run', built),
          row('text built once, a run', once),
          row('text built each claim, none', builtEmpty),
          row('text built once, none', onceEmpty)
        ].join('\n')
      } finally {
        await app.close()
      }
    } finally {
      await database.close().catch(() => {})
      rmSync(dataDir, { recursive: true, force: true })
    }
  })
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(await benchClaimCpu())
}
