// npm run bench -- workspaces: what a thread workspace that follows its thread costs a run,
// and what Postgres sees per run.
//
// 1. Sessions on a small workspace (20 files, 40 KB) on one instance, the way a run's tool
//    calls open and its end closes one: unchanged (this disk has the saved revision: one
//    statement to take the lease, a walk, one to free it), changed (the walk, a tar.gz
//    into the blob store, the row), and restored (another instance saved last: the archive
//    is read and unpacked first). On the embedded database.
// 2. With BENCH_DATABASE_URL: echo runs on one instance (4 workers) against a database of
//    their own: runs per second, and per run the transactions, rows written and WAL bytes
//    (pg_stat_database of that database; WAL is the whole cluster's, an upper bound on a
//    shared server).
import { randomUUID } from 'node:crypto'
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { testConfig } from '../src/config.js'

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 50)

function pct(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
const ms = (n: number) => `${n.toFixed(1)} ms`

async function sessions(databaseUrl: string | undefined): Promise<string> {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-bench-ws-'))
  const app = await buildApp({
    config: testConfig({
      DATA_DIR: dataDir,
      SANDBOX_UNCONFINED: 'true',
      RUN_WORKER_CONCURRENCY: '0',
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {})
    })
  })
  await app.ready()
  try {
    const workspaces = app.runtime.workspaces!
    const key = { orgId: DEV_ORG.id, threadId: randomUUID() }
    const dir = join(dataDir, 'sandboxes', key.orgId, key.threadId)
    await mkdir(join(dir, 'src'), { recursive: true })
    for (let i = 0; i < 20; i++) await writeFile(join(dir, 'src', `file-${i}.txt`), 'x'.repeat(2048))
    // the first save
    await (await workspaces.open(key, { wait: false })).close()
    const time = async (before: () => Promise<void>) => {
      const took: number[] = []
      for (let i = 0; i < ROUNDS; i++) {
        await before()
        const started = performance.now()
        const session = await workspaces.open(key, { wait: false })
        if (before === change) await writeFile(join(dir, 'src', 'file-0.txt'), `changed ${i}`)
        await session.close()
        took.push(performance.now() - started)
      }
      return took
    }
    const nothing = async () => {}
    const change = async () => {}
    // another instance saved since: this disk's copy no longer passes for the saved revision
    const elsewhere = async () => {
      await rm(join(dataDir, 'sandbox-state', key.orgId, `${key.threadId}.json`), { force: true })
    }
    const rows: string[] = []
    for (const [name, before] of [
      ['unchanged', nothing],
      ['changed (saved)', change],
      ['restored first', elsewhere]
    ] as const) {
      const took = await time(before)
      rows.push(`| ${name} | ${ms(pct(took, 50))} | ${ms(pct(took, 90))} | ${ms(pct(took, 99))} |`)
    }
    return [
      `Workspace sessions, ${ROUNDS} each, 20 files of 2 KB, ${databaseUrl ? 'Postgres' : 'embedded database'}:`,
      '',
      '| session | median | p90 | p99 |',
      '| --- | ---: | ---: | ---: |',
      ...rows
    ].join('\n')
  } finally {
    await app.close()
    await rm(dataDir, { recursive: true, force: true })
  }
}

async function perRun(serverUrl: string): Promise<string> {
  const runs = Number(process.env.BENCH_RUNS ?? 500)
  const name = `cairn_bench_${process.pid}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-bench-runs-'))
  try {
    const app = await buildApp({
      config: testConfig({
        DATA_DIR: dataDir,
        DATABASE_URL: url.toString(),
        SANDBOX_UNCONFINED: 'true',
        ALLOW_DEV_ORG: 'true',
        RUN_POLL_MS: '50'
      })
    })
    await app.ready()
    const stats = async () =>
      (
        await admin.unsafe(`select xact_commit + xact_rollback as xacts, tup_inserted, tup_updated, tup_deleted, pg_current_wal_lsn() as lsn
      from pg_stat_database where datname = '${name}'`)
      )[0] as unknown as { xacts: string; tup_inserted: string; tup_updated: string; tup_deleted: string; lsn: string }
    // one warm-up run, then the measured ones
    const warm = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'warm up' } })
    await app.inject({ url: `/api/runs/${warm.json().run.id}?wait=30` })
    await app.close()
    const before = await stats()
    const again = await buildApp({
      config: testConfig({
        DATA_DIR: dataDir,
        DATABASE_URL: url.toString(),
        SANDBOX_UNCONFINED: 'true',
        ALLOW_DEV_ORG: 'true',
        RUN_POLL_MS: '50'
      })
    })
    await again.ready()
    const started = performance.now()
    const ids: string[] = []
    for (let i = 0; i < runs; i++)
      ids.push(
        (
          await again.inject({ method: 'POST', url: '/api/runs', payload: { prompt: `run ${i} says a few words` } })
        ).json().run.id
      )
    for (const id of ids) await again.inject({ url: `/api/runs/${id}?wait=60` })
    const seconds = (performance.now() - started) / 1000
    // backends report their counters when they end
    await again.close()
    await new Promise((resolve) => setTimeout(resolve, 1500))
    const after = await stats()
    const [{ bytes }] = (await admin.unsafe(
      `select pg_wal_lsn_diff('${after.lsn}', '${before.lsn}') as bytes`
    )) as unknown as [{ bytes: string }]
    const per = (a: string, b: string) => ((Number(a) - Number(b)) / runs).toFixed(1)
    return [
      `Echo runs on one instance (4 workers), Postgres, ${runs} runs: ${(runs / seconds).toFixed(0)} runs/s accepted and finished.`,
      '',
      '| per run | transactions | rows inserted | rows updated | rows deleted | WAL bytes (cluster) |',
      '| --- | ---: | ---: | ---: | ---: | ---: |',
      `| echo run | ${per(after.xacts, before.xacts)} | ${per(after.tup_inserted, before.tup_inserted)} | ${per(after.tup_updated, before.tup_updated)} | ${per(after.tup_deleted, before.tup_deleted)} | ${(Number(bytes) / runs).toFixed(0)} |`
    ].join('\n')
  } finally {
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end()
    await rm(dataDir, { recursive: true, force: true })
  }
}

export async function benchWorkspaces(): Promise<string> {
  const out = [await sessions(undefined)]
  const server = process.env.BENCH_DATABASE_URL
  if (server) out.push(await perRun(server))
  return out.join('\n\n')
}
