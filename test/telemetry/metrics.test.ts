import { spawn, spawnSync } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import t from 'tap'
import { newId } from '../../src/db/ids.js'
import { memoryCaptures } from '../../src/memory/tables.js'
import {
  COUNTS_MAX_AGE_MS,
  COUNTS_REFRESH_MS,
  COUNTS_WATCHED_MS,
  databaseGauges
} from '../../src/telemetry/database-gauges.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import { buildTestApp, signUpWithOrg, type Teardown } from '../helper.js'
import { embeddedOnly } from '../passes.js'
import { finishedRun } from '../runs/run-helpers.js'
import { eventually } from '../runs/sse-client.js'
import { startToolModel } from '../runs/tool-model.js'

/** Prometheus as Debian packages it; where it is missing the scrape test skips, saying so. */
const PROMETHEUS = process.env.PROMETHEUS_BIN ?? '/usr/bin/prometheus'
const prometheusMissing = spawnSync(PROMETHEUS, ['--version']).status === 0 ? false : `${PROMETHEUS} is not installed`

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  return port
}

/** A real Prometheus on a free port, scraping `target` (host:port) every second, with its own storage. */
async function startPrometheus(t: Teardown, target: string, token: string) {
  const dir = await mkdtemp(join(tmpdir(), 'cairn-prometheus-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await writeFile(join(dir, 'token'), token)
  await writeFile(
    join(dir, 'prometheus.yml'),
    [
      'global: { scrape_interval: 1s, scrape_timeout: 1s }',
      'scrape_configs:',
      '  - job_name: cairn',
      '    metrics_path: /metrics',
      `    authorization: { credentials_file: ${join(dir, 'token')} }`,
      `    static_configs: [{ targets: ['${target}'] }]`,
      ''
    ].join('\n')
  )
  const port = await freePort()
  const child = spawn(
    PROMETHEUS,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn'
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] }
  )
  let stderr = ''
  child.stderr.on('data', (chunk) => (stderr += chunk))
  const exited = once(child, 'exit')
  t.teardown(async () => {
    child.kill('SIGTERM')
    await exited
  })
  const base = `http://127.0.0.1:${port}`
  // ready once its web API answers (it says so at /-/ready); an early exit fails at once
  const ready = await Promise.race([
    eventually(async () => (await fetch(`${base}/-/ready`).catch(() => null))?.ok === true, 30_000),
    exited.then(() => false)
  ])
  if (!ready) throw new Error(`Prometheus did not start: ${stderr}`)
  const query = async (promql: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> => {
    const res = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(promql)}`)
    const body = (await res.json()) as { status: string; data: { result: never[] } }
    if (body.status !== 'success') throw new Error(`query ${promql}: ${JSON.stringify(body)}`)
    return body.data.result
  }
  return { query, stderr: () => stderr }
}

/** The value of one sample of `/metrics` text, or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue
    const match = /^([a-z_]+)(\{([^}]*)\})? (\S+)$/.exec(line)
    if (!match || match[1] !== name) continue
    const have = Object.fromEntries(
      [...(match[3] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!])
    ) as Record<string, string>
    if (
      Object.entries(labels).every(([k, v]) => have[k] === v) &&
      Object.keys(have).length === Object.keys(labels).length
    )
      return Number(match[4])
  }
  return undefined
}

t.test(
  'a real Prometheus scrapes GET /metrics: the counters after known runs',
  { ...embeddedOnly, skip: embeddedOnly.skip || prometheusMissing },
  async (t) => {
    const model = await startToolModel(t)
    const dir = await mkdtemp(join(tmpdir(), 'cairn-metrics-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    const token = 'metrics-token-for-the-scraper'
    const app = await buildTestApp(t, {
      env: {
        OPENAI_BASE_URL: model.url,
        MODELS: 'tool-model',
        RUN_POLL_MS: '50',
        DATA_DIR: dir,
        SANDBOX_UNCONFINED: 'true',
        METRICS_TOKEN: token
      }
    })
    const base = await app.listen({ port: 0, host: '127.0.0.1' })
    const owner = await signUpWithOrg(app)
    const start = async (payload: Record<string, unknown>) => {
      const res = await app.inject({ method: 'POST', url: '/api/runs', headers: { cookie: owner.cookie }, payload })
      t.equal(res.statusCode, 201, res.body)
      return res.json().run.id as string
    }
    // a run that lists its files (an automatic tool) and answers; one that answers at once; an echo run
    model.script.push(
      { calls: [{ id: 'call_1', name: 'list_files', arguments: '{}' }] },
      { text: 'Nothing here.' },
      { text: 'Hello.' }
    )
    const first = await start({ prompt: 'what is here?', engine: 'openai', model: 'tool-model' })
    t.match(await finishedRun(app, owner.cookie, first), { status: 'succeeded' })
    const second = await start({ prompt: 'say hello', engine: 'openai', model: 'tool-model' })
    t.match(await finishedRun(app, owner.cookie, second), { status: 'succeeded' })
    const echo = await start({ prompt: 'one two', engine: 'echo' })
    t.match(await finishedRun(app, owner.cookie, echo), { status: 'succeeded' })

    const prometheus = await startPrometheus(t, new URL(base).host, token)
    const value = async (promql: string) => {
      const result = await prometheus.query(promql)
      return result.length === 0 ? undefined : Number(result[0]!.value[1])
    }
    // scraped with the token (the scraper is on loopback too, but the token is what a remote one shows)
    const up = await eventually(async () => (await value('up{job="cairn"}')) === 1, 30_000)
    t.ok(up, `Prometheus scraped the service: ${prometheus.stderr()}`)
    t.equal(await value('sum(cairn_runs_started_total{origin="web"})'), 3)
    t.equal(await value('sum(cairn_runs_ended_total{origin="web",status="succeeded"})'), 3)
    t.equal(await value('sum(cairn_run_duration_seconds_count{status="succeeded"})'), 3)
    t.equal(await value('sum(cairn_run_queue_wait_seconds_count)'), 3)
    t.equal(await value('cairn_model_tokens_total{provider="openai",model="tool-model",type="input"}'), 15)
    t.equal(await value('cairn_model_tokens_total{provider="openai",model="tool-model",type="output"}'), 6)
    t.equal(
      await value('cairn_model_call_duration_seconds_count{provider="openai",model="tool-model",outcome="ok"}'),
      3
    )
    t.equal(await value('cairn_tool_calls_total{tool="list_files",outcome="ok"}'), 1)
    t.equal(await value('cairn_run_queue_depth{state="queued"}'), 0)
    t.equal(await value('cairn_approvals_pending'), 0)
    t.equal(await value('cairn_memory_capture_outbox{state="dead"}'), 0)
    t.equal(await value('cairn_db_pool_connections{state="max"}'), 1, 'the embedded database: one connection')
    t.ok(
      ((await value(
        'sum(cairn_http_request_duration_seconds_count{method="POST",route="/api/runs",status_code="201"})'
      )) ?? 0) >= 3,
      'the dispatches, by route pattern and status'
    )
    t.ok((await value('nodejs_eventloop_lag_seconds')) !== undefined, 'the event loop lag')
    const series = await prometheus.query('{job="cairn"}')
    const values = series.flatMap((s) => Object.values(s.metric))
    t.notOk(
      values.some((v) => [first, second, echo, owner.org.id].includes(v)),
      'no run or org id in any label'
    )
  }
)

t.test('GET /metrics: loopback or the token, else 404; the backlog gauges count the database', async (t) => {
  const token = 'a-metrics-token-of-some-length'
  const app = await buildTestApp(t, { env: { RUN_WORKER_CONCURRENCY: '0', METRICS_TOKEN: token } })
  const owner = await signUpWithOrg(app)
  const ids: string[] = []
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: `queued ${i}`, engine: 'echo' }
    })
    ids.push(res.json().run.id)
  }
  await app.db.insert(toolApprovals).values({
    id: newId(),
    orgId: owner.org.id,
    runId: ids[0]!,
    rootRunId: ids[0]!,
    callId: 'call_1',
    tool: 'shell',
    arguments: {},
    expiresAt: new Date(Date.now() + 60_000)
  })
  for (const state of ['pending', 'dead', 'dead', 'delivered'] as const)
    await app.db.insert(memoryCaptures).values({
      id: newId(),
      orgId: owner.org.id,
      runId: newId(),
      rootRunId: ids[0]!,
      state,
      maxAttempts: 3,
      itemCount: 1,
      facts: ['a fact'],
      // not due: the capture worker leaves the pending one where it is
      nextAttemptAt: new Date(Date.now() + 3_600_000)
    })

  const local = await app.inject({ method: 'GET', url: '/metrics' })
  t.equal(local.statusCode, 200)
  t.match(local.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  t.equal(sample(local.body, 'cairn_run_queue_depth', { state: 'queued' }), 3)
  t.equal(sample(local.body, 'cairn_run_queue_depth', { state: 'running' }), 0)
  t.equal(sample(local.body, 'cairn_approvals_pending'), 1)
  t.equal(sample(local.body, 'cairn_memory_capture_outbox', { state: 'pending' }), 1)
  t.equal(sample(local.body, 'cairn_memory_capture_outbox', { state: 'dead' }), 2)
  t.equal(sample(local.body, 'cairn_memory_capture_outbox', { state: 'delivered' }), undefined, 'the backlog only')
  t.ok((sample(local.body, 'cairn_db_pool_connections', { state: 'max' }) ?? 0) >= 1)
  t.notMatch(local.body, new RegExp(owner.org.id), 'no org id without METRICS_PER_ORG')

  const marked = await app.inject({ method: 'GET', url: '/metrics', headers: { 'x-cairn-outbound': '1' } })
  t.equal(marked.statusCode, 404, "a request the service made (to an org's URL) is not a local scraper")

  const remote = { remoteAddress: '203.0.113.7' }
  const refused = await app.inject({ method: 'GET', url: '/metrics', ...remote })
  t.equal(refused.statusCode, 404, 'another address without the token: no such route')
  t.same(refused.json(), { error: 'not_found', message: 'no route for GET /metrics' })
  const wrong = await app.inject({
    method: 'GET',
    url: '/metrics',
    headers: { authorization: `Bearer ${token}x` },
    ...remote
  })
  t.equal(wrong.statusCode, 404)
  const shown = await app.inject({
    method: 'GET',
    url: '/metrics',
    headers: { authorization: `Bearer ${token}` },
    ...remote
  })
  t.equal(shown.statusCode, 200, 'the token opens it from anywhere')
  t.equal(sample(shown.body, 'cairn_run_queue_depth', { state: 'queued' }), 3)
  t.equal((await app.inject({ method: 'GET', url: '/api/metrics' })).statusCode, 404, 'never under the API')

  const perOrg = await buildTestApp(t, {
    db: app.testDb,
    env: { RUN_WORKER_CONCURRENCY: '0', METRICS_PER_ORG: 'true' }
  })
  const text = (await perOrg.inject({ method: 'GET', url: '/metrics' })).body
  t.equal(sample(text, 'cairn_run_queue_depth', { state: 'queued', org: owner.org.id }), 3, 'per org when asked')
  t.equal(sample(text, 'cairn_approvals_pending', { org: owner.org.id }), 1)
})

t.test('the backlog counts are read ahead while someone scrapes, and never shown older than their bound', async (t) => {
  const app = await buildTestApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(app)
  const queue = async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'queued', engine: 'echo' }
    })
    t.equal(res.statusCode, 201, res.body)
  }
  // the test's time: a clock it moves and timers it fires
  let now = 0
  const waiting = new Map<number, { fn: () => void; ms: number }>()
  let next = 0
  let scheduled = () => {}
  const timers = {
    setTimeout: (fn: () => void, ms: number) => {
      waiting.set(++next, { fn, ms })
      scheduled()
      return next
    },
    clearTimeout: (handle: unknown) => void waiting.delete(handle as number)
  }
  /** Fires the one timer waiting (a read ahead); returns once the read ended, when the next one is waiting. */
  const fire = async () => {
    t.equal(waiting.size, 1, 'one read ahead is waiting')
    const [handle, { fn, ms }] = [...waiting][0]!
    t.equal(ms, COUNTS_REFRESH_MS)
    waiting.delete(handle)
    const again = new Promise<void>((resolve) => (scheduled = resolve))
    fn()
    await again
  }
  const errors: unknown[] = []
  const gauges = databaseGauges(app.database, false, (err) => errors.push(err), { now: () => now, timers })
  t.teardown(() => gauges.stop())
  const queued = async () => sample(await gauges.registry.metrics(), 'cairn_run_queue_depth', { state: 'queued' })

  t.equal(await queued(), 0, 'the first scrape reads the counts itself')
  await queue()
  t.equal(await queued(), 0, 'a scrape at once after it is served the counts just read')
  now += COUNTS_REFRESH_MS
  await fire()
  t.equal(await queued(), 1, 'the read ahead brought the new run')

  await queue()
  now += COUNTS_MAX_AGE_MS + 1
  t.equal(await queued(), 2, 'counts older than their bound are read again by the scrape, whatever the timer')

  now += COUNTS_WATCHED_MS + 1
  const [handle, { fn }] = [...waiting][0]!
  waiting.delete(handle)
  fn()
  t.equal(waiting.size, 0, 'nobody scraped for a long while: no more reading ahead')
  t.same(errors, [])
})
