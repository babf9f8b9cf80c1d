import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import autocannon from 'autocannon'
import postgres from 'postgres'

export interface Result {
  name: string
  rps: number
  /** from every response's time, as p95 */
  p50: number
  p99: number
  p90: number
  /** from every response's time (autocannon's own percentiles skip p95) */
  p95: number
  p975: number
  non2xx: number
  errors: number
}

export interface LoadOptions {
  url: string
  name: string
  method?: 'GET' | 'POST'
  headers?: Record<string, string>
  body?: string
  connections?: number
  seconds?: number
  /** a fresh request per call, for bodies or headers that must differ */
  setupRequest?: (req: Record<string, unknown>) => Record<string, unknown>
}

/**
 * The value at `share` of the sorted times (nearest rank), in ms with two decimals (with one,
 * a ratio of two sub-millisecond medians moved by a tenth or more on rounding alone).
 */
function percentile(times: number[], share: number): number {
  if (times.length === 0) return 0
  const sorted = Float64Array.from(times).sort()
  return Math.round(sorted[Math.min(sorted.length - 1, Math.ceil(share * sorted.length) - 1)]! * 100) / 100
}

/** Runs autocannon against a listening server: requests/s and tail latency in ms. */
export async function load(opts: LoadOptions): Promise<Result> {
  const run = (duration: number, times?: number[]) =>
    new Promise<autocannon.Result>((resolve, reject) => {
      const instance = autocannon(
        {
          url: opts.url,
          method: opts.method ?? 'GET',
          headers: opts.headers,
          body: opts.body,
          connections: opts.connections ?? Number(process.env.BENCH_CONNECTIONS ?? 50),
          pipelining: Number(process.env.BENCH_PIPELINING ?? 1),
          duration,
          requests: opts.setupRequest ? [{ setupRequest: opts.setupRequest as never }] : undefined
        },
        (err, result) => (err ? reject(err) : resolve(result))
      )
      if (times) instance.on('response', (_client, _status, _bytes, ms) => times.push(ms))
    })
  // a short unmeasured run first, so every case is measured warm (JIT, pools, caches)
  await run(Number(process.env.BENCH_WARMUP_SECONDS ?? 2))
  const times: number[] = []
  const result = await run(opts.seconds ?? Number(process.env.BENCH_SECONDS ?? 8), times)
  return {
    name: opts.name,
    rps: Math.round(result.requests.average),
    p99: result.latency.p99,
    p90: result.latency.p90,
    p50: percentile(times, 0.5),
    p95: percentile(times, 0.95),
    p975: result.latency.p97_5,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts
  }
}

/**
 * Measures several cases in interleaved rounds and keeps each case's best round. On a
 * shared 2-core machine a neighbour's burst otherwise decides which case "wins"; with the
 * cases alternating, a slow patch hits every case alike, and the best round of each is
 * the one least disturbed. BENCH_ROUNDS rounds share BENCH_SECONDS per case.
 */
export async function interleaved(
  cases: LoadOptions[],
  rounds = Number(process.env.BENCH_ROUNDS ?? 3)
): Promise<Result[]> {
  const seconds = Math.max(1, Number(process.env.BENCH_SECONDS ?? 8) / rounds)
  const best = new Map<string, Result>()
  for (let round = 0; round < rounds; round++) {
    for (const c of cases) {
      const result = await load({ ...c, seconds: c.seconds ?? seconds })
      const prev = best.get(c.name)
      if (!prev || result.rps > prev.rps) best.set(c.name, result)
    }
  }
  return cases.map((c) => best.get(c.name)!)
}

/** The middle of some figures (the upper one of the two middles for an even count; 0 for none). */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0
}

/** The CPU time a process has used, user and system, in ms (Linux: /proc/<pid>/stat, in clock ticks of 10 ms). */
export function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  // utime and stime are the 14th and 15th fields of the line, the 12th and 13th after the command
  return (Number(fields[11]) + Number(fields[12])) * 10
}

/**
 * The service's CPU per request for `count` requests, `concurrency` at a time: on a machine
 * other work shares, CPU spent says more than requests per second.
 */
export async function cpuPerRequest(pid: number, count: number, send: () => Promise<void>, concurrency = 10) {
  let left = count
  const before = cpuMs(pid)
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await send()
    })
  )
  return (cpuMs(pid) - before) / count
}

export interface Server {
  url: string
  process: ChildProcess
  stop(): Promise<void>
}

/**
 * A benchmark server's environment: this process's, with its own data directory, any free
 * port, `LOG_LEVEL=warn`, and the case's variables. A server runs on PGlite unless the case
 * gives it a DATABASE_URL: an inherited one would point every case at the caller's own
 * database (the benchmarks make their own with `withDatabase`).
 */
export function benchEnv(dataDir: string, env: Record<string, string>): Record<string, string | undefined> {
  const { DATABASE_URL: _inherited, ...inherited } = process.env
  // dispatch benchmarks queue far more runs than an org may by default: no queue limit
  // unless a benchmark sets one (the figures measure the service, not the refusal)
  return {
    ...inherited,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    RUN_QUEUE_MAX_PER_ORG: '0',
    ...env
  }
}

/**
 * Node options for the service processes benchmarks start, from BENCH_SERVER_NODE_ARGS (for
 * example `--cpu-prof --cpu-prof-dir=prof` to see where a benchmark's service spends its time).
 */
export function serverNodeArgs(): string[] {
  return (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean)
}

/** Starts a server script (TypeScript, through tsx) as its own process, so load and service do not share a loop. */
export async function startServer(
  script: string,
  env: Record<string, string> = {},
  readyTimeoutMs = 60_000
): Promise<Server> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-'))
  const child = spawn(process.execPath, [...serverNodeArgs(), '--import', 'tsx', script], {
    env: benchEnv(dataDir, env),
    stdio: ['ignore', 'pipe', 'inherit']
  })
  const lines = createInterface({ input: child.stdout! })
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not report its address`)), readyTimeoutMs)
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)))
    lines.on('line', (line) => {
      const match = /listening on (http:\/\/\S+)/.exec(line)
      if (match) {
        clearTimeout(timer)
        resolve(match[1]!)
      }
    })
  })
  return {
    url,
    process: child,
    async stop() {
      child.kill('SIGTERM')
      if (child.exitCode === null) await once(child, 'exit')
      rmSync(dataDir, { recursive: true, force: true })
    }
  }
}

export function table(rows: Result[], baseline: Result): string {
  const out = [
    '| case | requests/s | p99 ms | ratio to baseline | non-2xx | errors |',
    '| --- | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const r of rows) {
    out.push(`| ${r.name} | ${r.rps} | ${r.p99} | ${(r.rps / baseline.rps).toFixed(2)} | ${r.non2xx} | ${r.errors} |`)
  }
  return out.join('\n')
}

/** Signs a user up, creates an org and mints an API key there: a session cookie and a bearer header. */
export async function credentials(url: string): Promise<{ cookie: string; authorization: string }> {
  const json = { 'content-type': 'application/json' }
  const signUp = await fetch(`${url}/api/auth/sign-up`, {
    method: 'POST',
    headers: json,
    body: JSON.stringify({ email: `bench-${Date.now()}@example.test`, password: 'benchmark password', name: 'Bench' })
  })
  if (signUp.status !== 201) throw new Error(`sign-up: ${signUp.status} ${await signUp.text()}`)
  const cookie = signUp.headers.getSetCookie()[0]!.split(';')[0]!
  const org = await fetch(`${url}/api/auth/organizations`, {
    method: 'POST',
    headers: { ...json, cookie },
    body: JSON.stringify({ name: `Bench org ${randomBytes(3).toString('hex')}` })
  })
  if (org.status !== 201) throw new Error(`create org: ${org.status}`)
  const key = await fetch(`${url}/api/keys`, {
    method: 'POST',
    headers: { ...json, cookie },
    body: JSON.stringify({ name: 'bench' })
  })
  if (key.status !== 201) throw new Error(`mint key: ${key.status}`)
  return { cookie, authorization: `Bearer ${((await key.json()) as { key: string }).key}` }
}

/** The Postgres server the benchmarks may use: BENCH_DATABASE_URL, else DATABASE_URL. */
export const benchPostgres = process.env.BENCH_DATABASE_URL ?? process.env.DATABASE_URL

/** Runs `fn` with the URL of a new database on that Postgres server, dropped afterwards. */
export async function withDatabase<T>(serverUrl: string, fn: (url: string) => Promise<T>): Promise<T> {
  const name = `cairn_bench_${randomBytes(4).toString('hex')}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  try {
    return await fn(url.toString())
  } finally {
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end()
  }
}
