// What seeing agents costs. Dispatch (POST /api/runs, no workers) and model-bound runs (each
// waits on a local model) with tracing off and with tracing on, exporting every span to a
// local OTLP/HTTP receiver; GET /metrics with 10,000 runs in the tables, next to GET
// /api/health. BENCH_BASELINE_TREE (a checkout of the commit to compare with, its
// node_modules installed or linked) adds that tree's dispatch with tracing off: "off" next
// to before the telemetry existed.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import {
  benchEnv,
  cpuMs,
  cpuPerRequest,
  credentials,
  interleaved,
  load,
  serverNodeArgs,
  table,
  type LoadOptions
} from './lib.js'
import { now, startBenchModel } from './model.js'

interface Service {
  url: string
  pid: number
  lines: AsyncIterableIterator<string>
  stop(): Promise<void>
}

/** bench/runs-server.ts from `tree` (this checkout by default), in its own process. */
async function service(env: Record<string, string>, tree = process.cwd()): Promise<Service> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-'))
  const child = spawn(process.execPath, [...serverNodeArgs(), '--import', 'tsx', 'bench/runs-server.ts'], {
    cwd: tree,
    env: benchEnv(dataDir, { NODE_ENV: 'development', ...env }),
    stdio: ['ignore', 'pipe', 'inherit']
  })
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  for (;;) {
    const { value, done } = await lines.next()
    if (done) throw new Error('runs-server exited before listening')
    const m = /listening on (http:\/\/\S+)/.exec(value)
    if (m) {
      return {
        url: m[1]!,
        pid: child.pid!,
        lines,
        async stop() {
          child.kill('SIGTERM')
          if (child.exitCode === null) await once(child, 'exit')
          rmSync(dataDir, { recursive: true, force: true })
        }
      }
    }
  }
}

/** A collector that takes every export (and counts its bytes), as fast as it can. */
async function startReceiver() {
  let bytes = 0
  let exports = 0
  const server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => (bytes += chunk.length))
    req.on('end', () => {
      exports++
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    endpoint: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    stats: () => ({ bytes, exports }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

async function dispatchCases(endpoint: string): Promise<string> {
  const baseline = process.env.BENCH_BASELINE_TREE
  const variants: Array<{ label: string; env: Record<string, string>; tree?: string }> = [
    { label: 'tracing off', env: {} },
    { label: 'tracing on, exporting', env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint } },
    ...(baseline
      ? [
          { label: 'tracing off (baseline tree)', env: {}, tree: baseline },
          {
            label: 'tracing on, exporting (baseline tree)',
            env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint },
            tree: baseline
          }
        ]
      : [])
  ]
  const services = await Promise.all(
    variants.map((v) => service({ RUN_WORKER_CONCURRENCY: '0', ...v.env }, v.tree ?? process.cwd()))
  )
  try {
    const cases: LoadOptions[] = []
    for (const [i, v] of variants.entries()) {
      const { authorization } = await credentials(services[i]!.url)
      cases.push({
        url: `${services[i]!.url}/api/runs`,
        name: `POST /api/runs, bearer key + Idempotency-Key (${v.label})`,
        method: 'POST',
        setupRequest: (req) => ({
          ...req,
          headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
          body: JSON.stringify({ prompt: 'bench run' })
        })
      })
    }
    const rows = await interleaved(cases)
    // then the CPU each dispatch costs the service, interleaved too, best of three
    const cpu = new Map<string, number>()
    for (let round = 0; round < 3; round++) {
      for (const [i, v] of variants.entries()) {
        const { authorization } = await credentials(services[i]!.url)
        const ms = await cpuPerRequest(services[i]!.pid, 1000, async () => {
          const res = await fetch(`${services[i]!.url}/api/runs`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
            body: JSON.stringify({ prompt: 'bench run' })
          })
          if (res.status !== 201) throw new Error(`POST /api/runs: ${res.status}`)
          await res.arrayBuffer()
        })
        cpu.set(v.label, Math.min(cpu.get(v.label) ?? Infinity, ms))
      }
    }
    const off = cpu.get('tracing off')!
    return [
      table(rows, rows[0]!),
      '',
      '| case | service CPU per dispatch (ms, best of 3 × 1000) | ratio to tracing off |',
      '| --- | ---: | ---: |',
      ...variants.map(
        (v) => `| ${v.label} | ${cpu.get(v.label)!.toFixed(2)} | ${(cpu.get(v.label)! / off).toFixed(2)} |`
      )
    ].join('\n')
  } finally {
    await Promise.all(services.map((s) => s.stop()))
  }
}

/** Runs that each wait on the model: the seconds from the first POST to the last end, best of three. */
async function modelBound(endpoint: string): Promise<string> {
  const RUNS = Number(process.env.BENCH_TELEMETRY_RUNS ?? 300)
  const model = await startBenchModel(() => [{ delta: { content: 'done' }, finish: 'stop' }], { delayMs: 200 })
  const variants: Array<{ label: string; env: Record<string, string> }> = [
    { label: 'tracing off', env: {} },
    { label: 'tracing on, exporting', env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint } }
  ]
  const best = new Map<string, number>()
  const cpuPerRun = new Map<string, number>()
  try {
    for (let round = 0; round < 3; round++) {
      for (const v of variants) {
        const s = await service({
          OPENAI_BASE_URL: model.url,
          MODELS: 'bench-model',
          RUN_POLL_MS: '100',
          // once the model answered its probe it stays ready: a probe that times out on a loaded machine must not
          // turn runs away mid-measurement
          OPENAI_PROBE_TTL_MS: '600000',
          ...v.env
        })
        try {
          for (let tries = 0; ; tries++) {
            const config = (await (await fetch(`${s.url}/api/config`)).json()) as { models: Array<{ engine: string }> }
            if (config.models.some((m) => m.engine === 'openai')) break
            if (tries === 60) throw new Error('the openai engine never became ready')
            await new Promise((resolve) => setTimeout(resolve, 500))
          }
          const cpuBefore = cpuMs(s.pid)
          const started = now()
          const ids = await Promise.all(
            Array.from({ length: RUNS }, async (_, i) => {
              const res = await fetch(`${s.url}/api/runs`, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({ prompt: `bound ${i}`, engine: 'openai', model: 'bench-model' })
              })
              if (res.status !== 201) throw new Error(`POST /api/runs: ${res.status} ${await res.text()}`)
              return ((await res.json()) as { run: { id: string } }).run.id
            })
          )
          for (const id of ids) {
            for (;;) {
              const run = (
                (await (await fetch(`${s.url}/api/runs/${id}?wait=60`)).json()) as { run: { status: string } }
              ).run
              if (run.status === 'succeeded') break
              if (run.status === 'failed' || run.status === 'cancelled') throw new Error(`a run ${run.status}`)
            }
          }
          const seconds = (now() - started) / 1000
          best.set(v.label, Math.min(best.get(v.label) ?? Infinity, seconds))
          const perRun = (cpuMs(s.pid) - cpuBefore) / RUNS
          cpuPerRun.set(v.label, Math.min(cpuPerRun.get(v.label) ?? Infinity, perRun))
        } finally {
          await s.stop()
        }
      }
    }
  } finally {
    await model.close()
  }
  const off = best.get('tracing off')!
  return [
    `${RUNS} runs posted at once, each waiting 200 ms on the model (RUN_WORKER_CONCURRENCY default); best of three.`,
    '',
    '| case | seconds, first POST to last end | runs/s | ratio to tracing off | service CPU per run (ms) | CPU ratio |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...variants.map((v) => {
      const seconds = best.get(v.label)!
      const cpu = cpuPerRun.get(v.label)!
      const cpuOff = cpuPerRun.get('tracing off')!
      return `| ${v.label} | ${seconds.toFixed(2)} | ${(RUNS / seconds).toFixed(1)} | ${(off / seconds).toFixed(2)} | ${cpu.toFixed(2)} | ${(cpu / cpuOff).toFixed(2)} |`
    })
  ].join('\n')
}

/**
 * GET /metrics (one scraper, then ten) with 10,000 runs in the tables, next to GET /api/health;
 * with BENCH_BASELINE_TREE, that tree's scrape too.
 */
async function metricsScrape(): Promise<string> {
  const baseline = process.env.BENCH_BASELINE_TREE
  const trees: Array<[string, string]> = [
    ['', process.cwd()],
    ...(baseline ? [[' (baseline tree)', baseline] as [string, string]] : [])
  ]
  const rows = []
  for (const [label, tree] of trees) {
    const s = await service(
      { RUN_WORKER_CONCURRENCY: '0', BENCH_FINISHED_RUNS: '9000', BENCH_WAITING_RUNS: '1000' },
      tree
    )
    try {
      rows.push(
        await load({ url: `${s.url}/api/health`, name: `GET /api/health (1 connection)${label}`, connections: 1 }),
        await load({
          url: `${s.url}/metrics`,
          name: `GET /metrics, 10,000 runs (1 connection)${label}`,
          connections: 1
        }),
        await load({
          url: `${s.url}/metrics`,
          name: `GET /metrics, 10,000 runs (10 connections)${label}`,
          connections: 10
        })
      )
    } finally {
      await s.stop()
    }
  }
  return table(rows, rows[0]!)
}

/**
 * BENCH_PARTS=metrics: the scrape alone (it needs no receiver and takes a minute); =dispatch: the dispatch alone;
 * =bound: the model-bound runs alone.
 */
export async function benchTelemetry(): Promise<string> {
  if (process.env.BENCH_PARTS === 'metrics') return ['### GET /metrics', '', await metricsScrape()].join('\n')
  // one part alone, with a receiver for its spans
  const alone =
    process.env.BENCH_PARTS === 'dispatch'
      ? (['Dispatch (no workers)', dispatchCases] as const)
      : process.env.BENCH_PARTS === 'bound'
        ? (['Model-bound runs', modelBound] as const)
        : null
  if (alone) {
    const receiver = await startReceiver()
    try {
      return [`### ${alone[0]}`, '', await alone[1](receiver.endpoint)].join('\n')
    } finally {
      await receiver.close()
    }
  }
  const receiver = await startReceiver()
  try {
    const dispatch = await dispatchCases(receiver.endpoint)
    // each part as it is measured (a later failure keeps it)
    process.stderr.write(`${dispatch}\n`)
    const bound = await modelBound(receiver.endpoint)
    const { exports, bytes } = receiver.stats()
    process.stderr.write(`${bound}\n`)
    const metrics = await metricsScrape()
    return [
      '### Dispatch (no workers)',
      '',
      dispatch,
      '',
      '### Model-bound runs',
      '',
      bound,
      '',
      `The receiver took ${exports} exports (${(bytes / 1e6).toFixed(1)} MB of spans).`,
      '',
      '### GET /metrics',
      '',
      metrics
    ].join('\n')
  } finally {
    await receiver.close()
  }
}
