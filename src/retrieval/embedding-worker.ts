import { createHash, randomUUID } from 'node:crypto'
import { sql } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, type Db } from '../db/client.js'
import { failureSentence } from '../db/faults.js'
import { bumpGeneration } from '../knowledge/generation.js'
import { backoffDelay, createWorkerLoop, type Clock, type LoopTimers } from '../worker-loop.js'
import { EmbeddingFailed, type EmbeddingModel, type EmbeddingModels } from './models.js'
import type { EmbeddingKind } from './tables.js'
import { vectorLiteral } from './vectors.js'

/** The tables whose new rows wait for the embedding job in a partial index of `embedding_queued` (see takeIn). */
const QUEUED_TABLES = ['memory_items', 'knowledge_records', 'knowledge_chunks'] as const

export interface EmbeddingWorkerOptions {
  db: Db
  log: FastifyBaseLogger
  models: EmbeddingModels
  /** texts per claim, and per /embeddings call */
  batch: number
  maxAttempts: number
  leaseMs: number
  pollMs: number
  backoffMs: number
  backoffMaxMs: number
  timeoutMs: number
  /** when a failed embedding is due again (tests move it) */
  clock: Clock
  timers?: LoopTimers | undefined
  random?: () => number
}

export interface EmbeddingWorker {
  start(): void
  stop(deadlineMs?: number): Promise<void>
  /** looks for texts soon (a write on this instance: writes close together share a claim), not at the next poll */
  wake(): void
  /** claims and embeds one batch; how many texts it claimed (0: none were due) */
  runOnce(): Promise<number>
  /** a crash (tests): nothing more is written, the claims are left to their leases */
  kill(): void
}

interface Claimed {
  org_id: string
  kind: EmbeddingKind
  item_id: string
  pool_id: string
  text_hash: string
  attempts: number
}

interface Batch {
  rows: Claimed[]
  /** the rows' texts as they are now, by `${kind}:${id}` */
  texts: Map<string, string>
}

const keyOf = (r: { kind: string; item_id: string }) => `${r.kind}:${r.item_id}`
export const textHash = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex')

/**
 * The embedding job: takes in new facts, records and chunks (see takeIn), claims pending texts in batches
 * (`FOR UPDATE SKIP LOCKED`, a lease per row, renewed while it works), embeds each org's texts
 * with that org's current model in one `/embeddings` call per model, and stores each vector
 * only where the row still has the text hash (and the lease) it claimed with: a text edited
 * meanwhile is claimed again with its new hash, a vector of an old text is never kept. A
 * failed call puts its texts back with backoff; after `maxAttempts` they are `failed` with the
 * reason. A dead worker's rows wait out their lease and are claimed again (embedding twice is
 * harmless: the same text gives the same vector).
 */
export function createEmbeddingWorker(o: EmbeddingWorkerOptions): EmbeddingWorker {
  const { db, log, clock } = o
  const owner = randomUUID()
  const random = o.random ?? Math.random
  let killed = false
  const abort = new AbortController()

  const now = () => clock.now().toISOString()

  /**
   * Takes in facts, knowledge records and chunks written since the last pass: a new one has no
   * row in `embeddings` (adding it wrote nothing but itself), only `embedding_queued = false`,
   * which a partial index of its table lists (`memory_items_embedding_due_idx`,
   * `knowledge_records_embedding_due_idx`, `knowledge_chunks_embedding_due_idx`). Setting the
   * flag fires the table's update trigger, which makes their rows pending (with their text
   * hashes and their own org) in this same statement: a crash before it commits leaves the flags
   * unset, so nothing is lost, and a text taken in twice (two instances) keeps one row. Rows
   * being written or edited right now are skipped, not waited for: the next pass takes them.
   * One statement for the three tables: one round trip per pass, idle or not.
   */
  async function takeIn(): Promise<void> {
    const takeInOf = (table: (typeof QUEUED_TABLES)[number]) => sql`
      ${sql.raw(`taken_${table}`)} as (
        update ${sql.raw(table)} set embedding_queued = true
        where id in (
          select id from ${sql.raw(table)} where not embedding_queued
          order by id limit ${o.batch}
          for update skip locked)
        returning 1)`
    await db.execute(sql`with ${sql.join(QUEUED_TABLES.map(takeInOf), sql`,`)} select 1`)
  }

  async function claim(): Promise<Batch | null> {
    await takeIn()
    const rows = rowsOf<Claimed>(
      await db.execute(sql`
      with due as (
        select kind, item_id from embeddings
        where state = 'pending' and next_attempt_at <= ${now()}::timestamptz
          and (lease_expires_at is null or lease_expires_at < now())
        order by next_attempt_at, item_id
        limit ${o.batch}
        for update skip locked)
      update embeddings e
      set lease_owner = ${owner}, lease_expires_at = now() + make_interval(secs => ${o.leaseMs / 1000}),
          attempts = e.attempts + 1, updated_at = now()
      from due
      where e.kind = due.kind and e.item_id = due.item_id
      returning e.org_id, e.kind, e.item_id, e.pool_id, e.text_hash, e.attempts`)
    )
    if (rows.length === 0) return null
    const ids = (kind: EmbeddingKind) => JSON.stringify(rows.filter((r) => r.kind === kind).map((r) => r.item_id))
    // the texts as the triggers hashed them (the same SQL functions)
    const texts = rowsOf<{ kind: EmbeddingKind; item_id: string; text: string }>(
      await db.execute(sql`
      select 'memory' as kind, m.id as item_id, m.content as text
      from memory_items m where m.id in (select jsonb_array_elements_text(${ids('memory')}::jsonb))
      union all
      select 'record', r.id, cairn_record_text(r.title, r.body)
      from knowledge_records r where r.id in (select jsonb_array_elements_text(${ids('record')}::jsonb))
      union all
      select 'chunk', c.id, cairn_chunk_text(c.heading, c.text)
      from knowledge_chunks c where c.id in (select jsonb_array_elements_text(${ids('chunk')}::jsonb))`)
    )
    return { rows, texts: new Map(texts.map((t) => [keyOf(t), t.text])) }
  }

  async function renew(batches: Batch[]): Promise<void> {
    const keys = batches.flatMap((b) => b.rows.map((r) => ({ kind: r.kind, item_id: r.item_id })))
    if (keys.length === 0) return
    await db.execute(sql`
      update embeddings e set lease_expires_at = now() + make_interval(secs => ${o.leaseMs / 1000})
      from jsonb_to_recordset(${JSON.stringify(keys)}::jsonb) as k(kind text, item_id text)
      where e.kind = k.kind and e.item_id = k.item_id and e.lease_owner = ${owner}`)
  }

  /** Stores vectors where the row still has the hash and the lease; search results of their pools move on. */
  async function store(model: EmbeddingModel, rows: Claimed[], vectors: number[][]): Promise<void> {
    const values = rows.map((r, i) => ({
      kind: r.kind,
      item_id: r.item_id,
      text_hash: r.text_hash,
      v: vectorLiteral(vectors[i]!)
    }))
    const dimensions = vectors[0]?.length ?? 0
    await db.transaction(async (tx) => {
      const kept = rowsOf<{ org_id: string; pool_id: string; kind: EmbeddingKind }>(
        await tx.execute(sql`
        update embeddings e
        set vector = r.v::vector, model = ${model.key}, dimensions = ${dimensions}, state = 'ready',
            last_error = null, lease_owner = null, lease_expires_at = null, updated_at = now()
        from jsonb_to_recordset(${JSON.stringify(values)}::jsonb) as r(kind text, item_id text, text_hash text, v text)
        where e.kind = r.kind and e.item_id = r.item_id and e.text_hash = r.text_hash and e.lease_owner = ${owner}
        returning e.org_id, e.pool_id, e.kind`)
      )
      // cached search results of these pools and orgs were made without these vectors
      const pools = [...new Set(kept.filter((k) => k.kind === 'memory').map((k) => k.pool_id))].sort()
      if (pools.length > 0)
        await tx.execute(sql`
          update memory_pools set generation = generation + 1
          where id in (select jsonb_array_elements_text(${JSON.stringify(pools)}::jsonb))`)
      for (const orgId of [...new Set(kept.filter((k) => k.kind !== 'memory').map((k) => k.org_id))].sort())
        await bumpGeneration(tx, orgId)
    })
  }

  /** Puts texts whose call failed back with backoff, or fails them when their tries are spent. */
  async function failed(rows: Claimed[], reason: string): Promise<void> {
    const values = rows.map((r) => ({
      kind: r.kind,
      item_id: r.item_id,
      text_hash: r.text_hash,
      last: r.attempts >= o.maxAttempts,
      due: new Date(clock.now().getTime() + backoffDelay(r.attempts, o.backoffMs, o.backoffMaxMs, random)).toISOString()
    }))
    const message = reason.slice(0, 1000)
    await db.execute(sql`
      update embeddings e
      set state = case when r.last then 'failed' else 'pending' end,
          last_error = ${message}, next_attempt_at = r.due::timestamptz,
          lease_owner = null, lease_expires_at = null, updated_at = now()
      from jsonb_to_recordset(${JSON.stringify(values)}::jsonb) as r(kind text, item_id text, text_hash text, last boolean, due text)
      where e.kind = r.kind and e.item_id = r.item_id and e.text_hash = r.text_hash and e.lease_owner = ${owner}`)
  }

  /** Hands back what was claimed and not settled (the text changed, or the worker is draining). */
  async function release(rows: Claimed[], unspend: boolean): Promise<void> {
    if (rows.length === 0) return
    const keys = rows.map((r) => ({ kind: r.kind, item_id: r.item_id }))
    await db.execute(sql`
      update embeddings e
      set lease_owner = null, lease_expires_at = null, attempts = greatest(0, e.attempts - ${unspend ? 1 : 0})
      from jsonb_to_recordset(${JSON.stringify(keys)}::jsonb) as k(kind text, item_id text)
      where e.kind = k.kind and e.item_id = k.item_id and e.lease_owner = ${owner}`)
  }

  async function work(batch: Batch, signal: AbortSignal): Promise<void> {
    // texts gone or changed since the claim: the trigger already made their rows pending again
    const live = batch.rows.filter((r) => {
      const text = batch.texts.get(keyOf(r))
      return text !== undefined && textHash(text) === r.text_hash
    })
    const byOrg = new Map<string, Claimed[]>()
    for (const r of live) byOrg.set(r.org_id, [...(byOrg.get(r.org_id) ?? []), r])
    // one call per model: orgs sharing a model share the call
    const byModel = new Map<string, { model: EmbeddingModel; rows: Claimed[] }>()
    for (const [orgId, rows] of byOrg) {
      let model: EmbeddingModel
      try {
        model = await o.models.forOrg(orgId)
      } catch (err) {
        await failed(rows, `the embedding model could not be read: ${failureSentence(err)}`)
        continue
      }
      const group = byModel.get(model.key) ?? { model, rows: [] }
      group.rows.push(...rows)
      byModel.set(model.key, group)
    }
    const settled = new Set<string>()
    for (const { model, rows } of byModel.values()) {
      if (signal.aborted) break
      let vectors: number[][]
      try {
        vectors = await model.embed(
          rows.map((r) => batch.texts.get(keyOf(r))!),
          { timeoutMs: o.timeoutMs, signal }
        )
      } catch (err) {
        if (signal.aborted) break
        const reason = err instanceof EmbeddingFailed ? err.message : `the embedding failed: ${failureSentence(err)}`
        log.warn({ model: model.model, texts: rows.length, reason }, 'embedding failed')
        await failed(rows, reason)
        for (const r of rows) settled.add(keyOf(r))
        continue
      }
      if (killed) return
      await store(model, rows, vectors)
      for (const r of rows) settled.add(keyOf(r))
    }
    if (killed) return
    await release(
      batch.rows.filter((r) => !settled.has(keyOf(r))),
      signal.aborted
    )
  }

  const loop = createWorkerLoop<Batch>({
    name: 'embedding worker',
    log,
    claim,
    work: (batch, signal) =>
      work(batch, AbortSignal.any([signal, abort.signal])).catch((err: unknown) => {
        if (!killed) log.warn({ err }, `embedding worker: a batch failed: ${failureSentence(err)}`)
      }),
    concurrency: 1,
    pollMs: o.pollMs,
    backoff: { baseMs: o.pollMs, maxMs: Math.max(o.pollMs, 60_000) },
    // a full batch suggests more are due
    claimAgain: (batch) => batch.rows.length >= o.batch,
    lease: { everyMs: Math.max(50, Math.floor(o.leaseMs / 3)), renew },
    drain: 'hand-back',
    // a burst of writes (each wakes it) shares one claim and one /embeddings call
    wakeDelayMs: 200,
    ...(o.timers ? { timers: o.timers } : {})
  })

  return {
    start: () => loop.start(),
    async stop(deadlineMs) {
      await loop.stop(deadlineMs)
    },
    wake: () => loop.wakeSoon(),
    async runOnce() {
      const batch = await claim()
      if (!batch) return 0
      await work(batch, abort.signal)
      return batch.rows.length
    },
    kill() {
      killed = true
      abort.abort()
      loop.kill()
    }
  }
}
