// Runs that wait on a model: each of N runs waits 2 s on a local OpenAI-compatible model before
// its answer starts. Reports, per RUN_WORKER_CONCURRENCY, how many model calls were in flight at
// once, how long the runs took from the first POST to the last end, and the service's event loop
// delay (p99, max) meanwhile: with 4 (the old default), the default and 128. BENCH_DATABASE_URL (or
// DATABASE_URL) adds the Postgres rows.
import { benchPostgres, withDatabase } from './lib.js'
import { now, startBenchModel } from './model.js'
import { startRunsServer } from './runs.js'
import { EnvSchema } from '../src/config.js'

const WAIT_MS = 2000
const CONCURRENCY_DEFAULT = (EnvSchema.properties.RUN_WORKER_CONCURRENCY as unknown as { default: number }).default

interface Row {
  database: string
  concurrency: number
  runs: number
  inFlight: number
  seconds: number
  lagP99: string
  lagMax: string
}

async function ended(url: string, id: string): Promise<string> {
  for (;;) {
    const run = ((await (await fetch(`${url}/api/runs/${id}?wait=60`)).json()) as { run: { status: string } }).run
    if (['succeeded', 'failed', 'cancelled'].includes(run.status)) return run.status
  }
}

async function one(database: string, databaseUrl: string | undefined, concurrency: number, runs: number): Promise<Row> {
  const inFlight = { now: 0, max: 0 }
  const model = await startBenchModel(() => [{ delta: { content: 'done' }, finish: 'stop' }], {
    delayMs: WAIT_MS,
    inFlight
  })
  const server = await startRunsServer({
    OPENAI_BASE_URL: model.url,
    MODELS: 'bench-model',
    RUN_WORKER_CONCURRENCY: String(concurrency),
    RUN_POLL_MS: '100',
    OPENAI_PROBE_TTL_MS: '1000',
    BENCH_LAG: '1',
    ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {})
  })
  const lag = async () => {
    server.child.kill('SIGUSR2')
    for (;;) {
      const { value, done } = await server.lines.next()
      if (done) throw new Error('the service exited')
      const m = /^lag p99 (\S+) max (\S+)/.exec(value)
      if (m) return { p99: m[1]!, max: m[2]! }
    }
  }
  try {
    // let the service finish starting (its first second is not the load's), then measure from here on
    await new Promise((resolve) => setTimeout(resolve, 1000))
    // the openai engine is ready once its probe of the model's /models answered (within 2 s); on a loaded
    // machine the first probe can fail, and a failed probe is kept for OPENAI_PROBE_TTL_MS: wait until it is
    for (let tries = 0; ; tries++) {
      const config = (await (await fetch(`${server.url}/api/config`)).json()) as { models: Array<{ engine: string }> }
      if (config.models.some((m) => m.engine === 'openai')) break
      if (tries === 60) throw new Error('the openai engine never became ready')
      await new Promise((resolve) => setTimeout(resolve, 1000))
    }
    await lag()
    const started = now()
    const ids = await Promise.all(
      Array.from({ length: runs }, async (_, i) => {
        const res = await fetch(`${server.url}/api/runs`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: `model-bound run ${i}`, engine: 'openai', model: 'bench-model' })
        })
        if (res.status !== 201) throw new Error(`POST /api/runs: ${res.status} ${await res.text()}`)
        return ((await res.json()) as { run: { id: string } }).run.id
      })
    )
    const statuses = await Promise.all(ids.map((id) => ended(server.url, id)))
    const failed = statuses.filter((s) => s !== 'succeeded').length
    if (failed > 0) throw new Error(`${failed} of ${runs} runs did not succeed`)
    const seconds = (now() - started) / 1000
    const { p99, max } = await lag()
    return { database, concurrency, runs, inFlight: inFlight.max, seconds, lagP99: p99, lagMax: max }
  } finally {
    await server.stop()
    await model.close()
  }
}

export async function benchModelBound(): Promise<string> {
  const rows: Row[] = []
  // the old default, the default, and more than the default (BENCH_MODEL_BOUND=concurrency:runs,… picks others)
  const cases: Array<[number, number]> = process.env.BENCH_MODEL_BOUND
    ? process.env.BENCH_MODEL_BOUND.split(',').map((c) => c.split(':').map(Number) as [number, number])
    : [
        [4, 24],
        [CONCURRENCY_DEFAULT, 200],
        [128, 200]
      ]
  for (const [concurrency, runs] of cases) rows.push(await one('PGlite (embedded)', undefined, concurrency, runs))
  if (benchPostgres) {
    for (const [concurrency, runs] of cases)
      rows.push(await withDatabase(benchPostgres, (url) => one('PostgreSQL', url, concurrency, runs)))
  }
  return [
    `Each run waits ${WAIT_MS / 1000} s on the model before its answer starts; all runs are posted at once.`,
    '',
    '| database | RUN_WORKER_CONCURRENCY | runs | most model calls in flight | seconds, first POST to last end | runs/s | event loop delay p99 ms | max ms |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map(
      (r) =>
        `| ${r.database} | ${r.concurrency} | ${r.runs} | ${r.inFlight} | ${r.seconds.toFixed(1)} | ${(r.runs / r.seconds).toFixed(1)} | ${r.lagP99} | ${r.lagMax} |`
    )
  ].join('\n')
}
