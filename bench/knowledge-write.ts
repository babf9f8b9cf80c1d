// The write path of knowledge, in process: adding a record (POST /api/knowledge through
// app.inject: the route, its transaction, history and vocabulary) and a document's chunks (one
// INSERT of 100 chunks, as the document worker writes them), with the embedding insert triggers
// as they were (a job row per record and chunk in the writing statement) and with the queue
// (`embedding_queued`, taken in by the job later), alternated in blocks in one database and one
// run. The job runs on no instance here: only the write is measured.
//   npx tsx bench/knowledge-write.ts                      (PGlite)
//   DATABASE_URL=postgres://… npx tsx bench/knowledge-write.ts
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { loadConfig } from '../src/config.js'
import { rowsOf } from '../src/db/client.js'
import { median, withDatabase } from './lib.js'

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 8)
const RECORDS = Number(process.env.BENCH_RECORDS ?? 150)
const DOCUMENTS = Number(process.env.BENCH_DOCUMENTS ?? 10)
const BODY = Array.from(
  { length: 12 },
  (_, i) => `Step ${i + 1}: the deploy pipeline of the billing service waits for the staging review before release. `
).join('')

type Mode = 'triggers' | 'queue'

async function run(databaseUrl: string | undefined): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-knowledge-write-'))
  const env = {
    ...process.env,
    DATA_DIR: dataDir,
    DATABASE_URL: databaseUrl ?? '',
    LOG_LEVEL: 'warn',
    EMBEDDING_WORKER: 'false',
    KNOWLEDGE_WORKER: 'false'
  }
  const app = await buildApp({ config: loadConfig(env) })
  await app.ready()
  const db = app.db
  await db.execute(sql`
    insert into knowledge_documents (id, org_id, name, kind, content_type, size, sha256, state, chunk_count, attempts, max_attempts)
    select 'bench-doc-' || d, ${DEV_ORG.id}, 'handbook-' || d || '.md', 'markdown', 'text/markdown', 60000, md5(d::text) || md5(d::text), 'ready', 100, 1, 3
    from generate_series(0, ${ROUNDS * 2 * DOCUMENTS - 1}) d`)
  let documentNo = 0
  async function setMode(mode: Mode) {
    const on = mode === 'triggers'
    for (const [table, fn] of [
      ['knowledge_records', 'cairn_embeddings_record_written'],
      ['knowledge_chunks', 'cairn_embeddings_chunk_written']
    ] as const) {
      await db.execute(sql.raw(`drop trigger if exists ${table}_embed_insert on ${table}`))
      if (on)
        await db.execute(
          sql.raw(`create trigger ${table}_embed_insert after insert on ${table}
            referencing new table as new_rows for each statement execute function ${fn}()`)
        )
      // as it was: nothing waits in the partial index
      await db.execute(sql.raw(`alter table ${table} alter column embedding_queued set default ${on}`))
    }
  }
  // on PostgreSQL (on this machine) the database's CPU is its backends': read from /proc
  const backends = async () =>
    databaseUrl
      ? rowsOf<{ pid: number }>(
          await db.execute(sql`select pid from pg_stat_activity where datname = current_database()`)
        ).map((r) => r.pid)
      : []
  const ticks = (pids: number[]) =>
    pids.reduce((sum, pid) => {
      try {
        const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
        return sum + Number(fields[11]) + Number(fields[12])
      } catch {
        return sum
      }
    }, 0)
  async function measure(fn: () => Promise<void>, n: number) {
    const pids = await backends()
    const dbTicks = ticks(pids)
    const cpu = process.cpuUsage()
    const started = process.hrtime.bigint()
    for (let i = 0; i < n; i++) await fn()
    const wall = Number(process.hrtime.bigint() - started) / 1e6 / n
    const used = process.cpuUsage(cpu)
    // clock ticks of 10 ms
    const database = ((ticks(pids) - dbTicks) * 10) / n
    return { wall, cpu: (used.user + used.system) / 1000 / n + database }
  }
  const samples: Record<
    Mode,
    { record: Array<{ wall: number; cpu: number }>; chunks: Array<{ wall: number; cpu: number }> }
  > = { triggers: { record: [], chunks: [] }, queue: { record: [], chunks: [] } }
  let n = 0
  const addRecord = async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/knowledge',
      payload: { title: `Runbook ${n++}`, body: `${BODY} Ticket ${n}.` }
    })
    if (res.statusCode !== 201) throw new Error(`${res.statusCode} ${res.body}`)
  }
  const addChunks = async () => {
    const doc = `bench-doc-${documentNo++}`
    await db.transaction(async (tx) => {
      await tx.execute(sql`
        insert into knowledge_chunks (id, org_id, document_id, idx, heading, text)
        select ${doc}::text || '-' || g, ${DEV_ORG.id}, ${doc}, g, 'Chapter ' || g, ${BODY}::text || g
        from generate_series(0, 99) g`)
    })
  }
  // warm up both paths
  for (const mode of ['triggers', 'queue'] as const) {
    await setMode(mode)
    await measure(addRecord, 20)
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of (round % 2 === 0 ? ['triggers', 'queue'] : ['queue', 'triggers']) as Mode[]) {
      await setMode(mode)
      samples[mode].record.push(await measure(addRecord, RECORDS))
      samples[mode].chunks.push(await measure(addChunks, DOCUMENTS))
    }
  }
  await app.close()
  rmSync(dataDir, { recursive: true, force: true })
  const line = (what: 'record' | 'chunks', key: 'wall' | 'cpu') => {
    const before = median(samples.triggers[what].map((s) => s[key]))
    const after = median(samples.queue[what].map((s) => s[key]))
    return `| ${what === 'record' ? 'add a record (POST)' : 'add 100 chunks (one INSERT)'} | ${key} ms | ${before.toFixed(3)} | ${after.toFixed(3)} | ${(after / before).toFixed(2)} |`
  }
  return [
    `${databaseUrl ? 'PostgreSQL' : 'PGlite'}: ${ROUNDS} rounds of ${RECORDS} records and ${DOCUMENTS} documents per mode, medians per operation (CPU: this process's, on PGlite the database's with it; on PostgreSQL its backends' added, from /proc); load ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
    '| operation | measure | insert triggers | queue | queue / triggers |',
    '| --- | --- | --- | --- | --- |',
    line('record', 'wall'),
    line('record', 'cpu'),
    line('chunks', 'wall'),
    line('chunks', 'cpu')
  ].join('\n')
}

const url = process.env.DATABASE_URL
process.stdout.write(
  `load before: ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}\n`
)
process.stdout.write(`${url ? await withDatabase(url, (u) => run(u)) : await run(undefined)}\n`)
