// The deployment's capacity on its own topology: 1 and 3 instances behind HAProxy (round
// robin, as deploy/haproxy.cfg) on one Postgres 15 cluster of the bench's own (initdb,
// like run-cost), everything on this machine. For each instance count:
// - dispatch: POST /api/runs (key + Idempotency-Key) through the proxy, the instances'
//   workers off, so only acceptance is measured;
// - runs: 20 clients start echo runs through the proxy for BENCH_SECONDS (10) while the
//   instances' workers (the default RUN_WORKER_CONCURRENCY) execute them; accepted and
//   finished per second, the drain after, what Postgres saw per run (commits, rows, WAL)
//   and the CPU seconds each part used (instances, Postgres, HAProxy, the load generator),
//   which says where the ceiling is on this machine.
// Needs haproxy on PATH and the Postgres 15 server binaries (PG_BIN), as the deployment
// test and run-cost do.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import postgres from 'postgres'
import { clusterSkip, startCluster } from '../test/db/cluster.js'
import { credentials, load } from './lib.js'
import { now } from './model.js'
import { startRunsServer } from './runs.js'

const HAPROXY = spawnSync('sh', ['-c', 'command -v haproxy'], { encoding: 'utf8' }).stdout.trim()
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10)
const COUNTS = (process.env.BENCH_TOPOLOGY_INSTANCES ?? '1,3').split(',').map(Number)
const POOL = process.env.DATABASE_POOL_MAX ?? '20'
const TICK = 100 // clock ticks per second (USER_HZ)

type Runs = Awaited<ReturnType<typeof startRunsServer>>

async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  await once(server, 'close')
  return port
}

/** CPU seconds of a process: [own, own + its reaped children's] (/proc/PID/stat) */
function cpu(pid: number): [number, number] {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number)
    // after the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14)
    const own = (f[11]! + f[12]!) / TICK
    return [own, own + (f[13]! + f[14]!) / TICK]
  } catch {
    return [0, 0]
  }
}

/** CPU seconds of the postmaster, its reaped children and its live ones (the backends). */
function postgresCpu(postmaster: number): number {
  let total = cpu(postmaster)[1]
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === postmaster) total += cpu(Number(entry))[0]
    } catch {
      // gone meanwhile
    }
  }
  return total
}

async function startProxy(
  dir: string,
  ports: number[]
): Promise<{ url: string; child: ChildProcess; stop(): Promise<void> }> {
  const port = await freePort()
  const config = join(dir, 'haproxy.cfg')
  writeFileSync(
    config,
    `
global
  maxconn 4000
defaults
  mode http
  timeout connect 2s
  timeout check 5s
  timeout client 1h
  timeout server 1h
  option redispatch
  retries 3
frontend api
  bind 127.0.0.1:${port}
  option forwardfor
  default_backend cairn
backend cairn
  balance roundrobin
  option httpchk GET /api/health?ready=1
${ports.map((p, i) => `  server cairn-${i + 1} 127.0.0.1:${p} check inter 1s fall 2 rise 2`).join('\n')}
`
  )
  const child = spawn(HAPROXY, ['-f', config, '-db'], { stdio: ['ignore', 'ignore', 'inherit'] })
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 30_000
  while ((await fetch(`${url}/api/health?ready=1`).catch(() => null))?.status !== 200) {
    if (child.exitCode !== null) throw new Error(`haproxy exited with ${child.exitCode}`)
    if (Date.now() > deadline) throw new Error('haproxy did not answer')
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return {
    url,
    child,
    async stop() {
      child.kill('SIGKILL')
      if (child.exitCode === null) await once(child, 'exit')
    }
  }
}

interface Deployment {
  url: string
  instances: Runs[]
  proxy: Awaited<ReturnType<typeof startProxy>>
  stop(): Promise<void>
}

async function deploy(count: number, env: Record<string, string>): Promise<Deployment> {
  const instances: Runs[] = []
  const dir = mkdtempSync(join(tmpdir(), 'cairn-topology-'))
  try {
    // one after another: each runs the migrations check against the same database
    for (let i = 0; i < count; i++) instances.push(await startRunsServer({ DATABASE_POOL_MAX: POOL, ...env }))
    const proxy = await startProxy(
      dir,
      instances.map((s) => Number(new URL(s.url).port))
    )
    return {
      url: proxy.url,
      instances,
      proxy,
      async stop() {
        await proxy.stop()
        await Promise.all(instances.map((s) => s.stop()))
        rmSync(dir, { recursive: true, force: true })
      }
    }
  } catch (err) {
    await Promise.all(instances.map((s) => s.stop()))
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
}

const flood = (url: string, authorization: string, seconds: number) =>
  new Promise<autocannon.Result>((resolve, reject) => {
    autocannon(
      {
        url: `${url}/api/runs`,
        method: 'POST',
        connections: 20,
        duration: seconds,
        requests: [
          {
            setupRequest: ((req: Record<string, unknown>) => ({
              ...req,
              headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
              body: JSON.stringify({ prompt: 'bench run' })
            })) as never
          }
        ]
      },
      (err, result) => (err ? reject(err) : resolve(result))
    )
  })

export async function benchTopology(): Promise<string> {
  if (clusterSkip) return `skipped: ${clusterSkip}`
  if (!HAPROXY) return 'skipped: haproxy is not installed (apt-get install haproxy)'
  const teardowns: Array<() => unknown> = []
  try {
    const cluster = await startCluster({ teardown: (fn) => void teardowns.unshift(fn) }, ['max_connections=200'])
    const admin = postgres(cluster.url, { max: 1, onnotice: () => {} })
    teardowns.unshift(() => admin.end())
    const [{ setting: dataDir }] = await admin<
      [{ setting: string }]
    >`select setting from pg_settings where name = 'data_directory'`
    const postmaster = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
    let n = 0
    const database = async () => {
      const name = `topology_${++n}`
      await admin.unsafe(`create database ${name}`)
      return { name, url: cluster.url.replace(/\/postgres$/, `/${name}`) }
    }

    const dispatchRows: string[] = []
    const runRows: string[] = []
    const costRows: string[] = []
    const cpuRows: string[] = []
    for (const count of COUNTS) {
      // dispatch: acceptance only (no workers)
      {
        const db = await database()
        const d = await deploy(count, { DATABASE_URL: db.url, RUN_WORKER_CONCURRENCY: '0' })
        try {
          const { authorization } = await credentials(d.url)
          const r = await load({
            url: `${d.url}/api/runs`,
            name: 'dispatch',
            method: 'POST',
            seconds: SECONDS,
            setupRequest: (req) => ({
              ...req,
              headers: { 'content-type': 'application/json', authorization, 'idempotency-key': randomUUID() },
              body: JSON.stringify({ prompt: 'bench run' })
            })
          })
          if (r.non2xx > 0 || r.errors > 0) throw new Error(`dispatch: ${r.non2xx} non-2xx, ${r.errors} errors`)
          dispatchRows.push(`| ${count} | ${r.rps} | ${r.p99} |`)
        } finally {
          await d.stop()
        }
      }
      // runs: accepted and executed meanwhile
      {
        const db = await database()
        const d = await deploy(count, { DATABASE_URL: db.url })
        try {
          const { authorization } = await credentials(d.url)
          const sql = postgres(db.url, { max: 1, onnotice: () => {} })
          try {
            const runs = async () => {
              const [row] = await sql<
                [{ total: number; finished: number; open: number }]
              >`select count(*)::int as total,
                count(*) filter (where status in ('succeeded', 'failed', 'cancelled'))::int as finished,
                count(*) filter (where status in ('queued', 'running'))::int as open from runs`
              return row
            }
            const stats = async () => {
              const [row] =
                await admin`select xact_commit, tup_inserted, tup_updated, tup_deleted, pg_current_wal_lsn() - '0/0'::pg_lsn as wal
                from pg_stat_database where datname = ${db.name}`
              return {
                commits: Number(row!.xact_commit),
                inserted: Number(row!.tup_inserted),
                updated: Number(row!.tup_updated),
                deleted: Number(row!.tup_deleted),
                wal: Number(row!.wal)
              }
            }
            const before = await stats()
            const cpuBefore = {
              instances: d.instances.reduce((s, i) => s + cpu(i.child.pid!)[0], 0),
              postgres: postgresCpu(postmaster),
              haproxy: cpu(d.proxy.child.pid!)[0],
              load: process.cpuUsage()
            }
            const load0 = loadavg()[0]!
            const started = now()
            const result = await flood(d.url, authorization, SECONDS)
            const loadMs = now() - started
            const atEnd = (await runs())!
            if (result.errors > 0 || result.non2xx > 0)
              throw new Error(`runs: ${result.non2xx} non-2xx, ${result.errors} errors`)
            let end = atEnd
            while (end.open > 0) {
              await new Promise((resolve) => setTimeout(resolve, 250))
              end = (await runs())!
            }
            const allMs = now() - started
            const used = process.cpuUsage(cpuBefore.load)
            const cpuUsed = {
              instances: d.instances.reduce((s, i) => s + cpu(i.child.pid!)[0], 0) - cpuBefore.instances,
              postgres: postgresCpu(postmaster) - cpuBefore.postgres,
              haproxy: cpu(d.proxy.child.pid!)[0] - cpuBefore.haproxy,
              load: (used.user + used.system) / 1e6
            }
            // pg_stat_database is updated at transaction ends, at most every 500 ms
            await new Promise((resolve) => setTimeout(resolve, 1200))
            const after = await stats()
            const per = (v: number) => (v / end.total).toFixed(1)
            runRows.push(
              `| ${count} | ${atEnd.total} | ${(atEnd.total / (loadMs / 1000)).toFixed(0)} | ${(atEnd.finished / (loadMs / 1000)).toFixed(0)} | ${((allMs - loadMs) / 1000).toFixed(1)} | ${(end.finished / (allMs / 1000)).toFixed(0)} | ${load0.toFixed(1)} |`
            )
            costRows.push(
              `| ${count} | ${end.total} | ${per(after.commits - before.commits)} | ${per(after.inserted - before.inserted)} | ${per(after.updated - before.updated)} | ${per(after.deleted - before.deleted)} | ${((after.wal - before.wal) / end.total / 1024).toFixed(1)} |`
            )
            const s = allMs / 1000
            const total = cpuUsed.instances + cpuUsed.postgres + cpuUsed.haproxy + cpuUsed.load
            const share = (v: number) =>
              `${v.toFixed(1)} s (${(v / s).toFixed(2)} cores, ${((v / total) * 100).toFixed(0)} %)`
            cpuRows.push(
              `| ${count} | ${s.toFixed(1)} | ${share(cpuUsed.instances)} | ${share(cpuUsed.postgres)} | ${share(cpuUsed.haproxy)} | ${share(cpuUsed.load)} | ${((cpuUsed.postgres * 1000) / end.total).toFixed(2)} ms | ${((cpuUsed.instances * 1000) / end.total).toFixed(2)} ms |`
            )
          } finally {
            await sql.end()
          }
        } finally {
          await d.stop()
        }
      }
    }
    return [
      `Instances behind HAProxy (round robin) on one Postgres 15 cluster of the bench's own, DATABASE_POOL_MAX=${POOL} each, everything on this machine (${SECONDS} s per case).`,
      '',
      'Dispatch: POST /api/runs through the proxy (key + Idempotency-Key, 50 connections), workers off:',
      '',
      '| instances | requests/s | p99 ms |',
      '| ---: | ---: | ---: |',
      ...dispatchRows,
      '',
      'Runs: 20 clients start echo runs through the proxy while the instances execute them (RUN_WORKER_CONCURRENCY default):',
      '',
      '| instances | runs accepted | accepted/s | finished/s during the load | s to drain after | finished/s, start to drained | load average (1 min) at start |',
      '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...runRows,
      '',
      "What Postgres saw per run in that case (pg_stat_database of the case's database; WAL of the whole cluster, nothing else writes to it):",
      '',
      '| instances | runs | commits | rows inserted | rows updated | rows deleted | WAL KiB |',
      '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...costRows,
      '',
      'CPU used from the start of the load to the drained queue (seconds; cores = seconds / wall time; share of what the four used):',
      '',
      "| instances | wall s | instances | Postgres | HAProxy | load generator | Postgres CPU per run | instances' CPU per run |",
      '| ---: | ---: | --- | --- | --- | --- | ---: | ---: |',
      ...cpuRows
    ].join('\n')
  } finally {
    for (const fn of teardowns) await fn()
  }
}
