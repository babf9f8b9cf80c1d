import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import autocannon from 'autocannon'

export interface Result {
  name: string
  rps: number
  p99: number
  p95: number
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

/** Runs autocannon against a listening server: requests/s and tail latency in ms. */
export async function load(opts: LoadOptions): Promise<Result> {
  // a short unmeasured run first, so every case is measured warm (JIT, pools, caches)
  await autocannon({
    url: opts.url,
    method: opts.method ?? 'GET',
    headers: opts.headers,
    body: opts.body,
    connections: opts.connections ?? Number(process.env.BENCH_CONNECTIONS ?? 50),
    pipelining: Number(process.env.BENCH_PIPELINING ?? 1),
    duration: Number(process.env.BENCH_WARMUP_SECONDS ?? 2),
    requests: opts.setupRequest ? [{ setupRequest: opts.setupRequest as never }] : undefined
  })
  const result = await autocannon({
    url: opts.url,
    method: opts.method ?? 'GET',
    headers: opts.headers,
    body: opts.body,
    connections: opts.connections ?? Number(process.env.BENCH_CONNECTIONS ?? 50),
    pipelining: Number(process.env.BENCH_PIPELINING ?? 1),
    duration: opts.seconds ?? Number(process.env.BENCH_SECONDS ?? 8),
    requests: opts.setupRequest ? [{ setupRequest: opts.setupRequest as never }] : undefined
  })
  return {
    name: opts.name,
    rps: Math.round(result.requests.average),
    p99: result.latency.p99,
    p95: result.latency.p97_5 ?? result.latency.p99,
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
export async function interleaved(cases: LoadOptions[], rounds = Number(process.env.BENCH_ROUNDS ?? 3)): Promise<Result[]> {
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

export interface Server {
  url: string
  process: ChildProcess
  stop(): Promise<void>
}

/** Starts a server script (TypeScript, through tsx) as its own process, so load and service do not share a loop. */
export async function startServer(script: string, env: Record<string, string> = {}): Promise<Server> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-'))
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  const lines = createInterface({ input: child.stdout! })
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not report its address`)), 60_000)
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
  const out = ['| case | requests/s | p99 ms | ratio to baseline | non-2xx | errors |', '| --- | ---: | ---: | ---: | ---: | ---: |']
  for (const r of rows) {
    out.push(`| ${r.name} | ${r.rps} | ${r.p99} | ${(r.rps / baseline.rps).toFixed(2)} | ${r.non2xx} | ${r.errors} |`)
  }
  return out.join('\n')
}
