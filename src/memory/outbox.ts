import { and, desc, eq, lt, sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import type { RunEventSink, RunRef } from '../runs/memory-port.js'
import { PoolWriteError, type MemoryBackend, type PoolRef } from './backend.js'
import { memoryCaptures } from './tables.js'

/** The most facts one capture keeps, and the longest fact. */
export const MAX_FACTS = 100
export const MAX_FACT_CHARS = 4000

export function cleanFacts(facts: readonly string[]): string[] {
  return facts.map((f) => f.trim().slice(0, MAX_FACT_CHARS)).filter((f) => f.length > 0).slice(0, MAX_FACTS)
}

/** Writes the run's capture row (pending) with the caller's transaction; one row per run. */
export async function enqueueCaptureRow(tx: Tx, run: RunRef, facts: string[], maxAttempts: number): Promise<void> {
  await tx.insert(memoryCaptures).values({
    id: newId(),
    orgId: run.orgId,
    runId: run.id,
    rootRunId: run.rootRunId,
    state: 'pending',
    maxAttempts,
    itemCount: facts.length,
    facts
  }).onConflictDoNothing()
}

export interface CaptureView {
  runId: string
  rootRunId: string
  state: string
  attempts: number
  maxAttempts: number
  lastError: string | null
  itemCount: number
  createdAt: string
  updatedAt: string
  nextAttemptAt: string
  deliveredAt: string | null
  orphan?: true
}

/** The org's capture rows, newest first; orphans (delivering, lease expired) are marked. */
export async function listCaptures(db: Db, orgId: string, opts: { limit: number; cursor?: string | undefined; state?: string | undefined }) {
  const where: SQL[] = [eq(memoryCaptures.orgId, orgId)]
  if (opts.cursor) where.push(lt(memoryCaptures.id, opts.cursor))
  if (opts.state) where.push(eq(memoryCaptures.state, opts.state as 'pending'))
  const rows = await db.select({
    id: memoryCaptures.id,
    runId: memoryCaptures.runId,
    rootRunId: memoryCaptures.rootRunId,
    state: memoryCaptures.state,
    attempts: memoryCaptures.attempts,
    maxAttempts: memoryCaptures.maxAttempts,
    lastError: memoryCaptures.lastError,
    itemCount: memoryCaptures.itemCount,
    createdAt: memoryCaptures.createdAt,
    updatedAt: memoryCaptures.updatedAt,
    nextAttemptAt: memoryCaptures.nextAttemptAt,
    deliveredAt: memoryCaptures.deliveredAt,
    orphan: sql<boolean>`(${memoryCaptures.state} = 'delivering' and ${memoryCaptures.leaseExpiresAt} < now())`
  }).from(memoryCaptures).where(and(...where)).orderBy(desc(memoryCaptures.id)).limit(opts.limit + 1)
  const captures: CaptureView[] = rows.slice(0, opts.limit).map((r) => ({
    runId: r.runId,
    rootRunId: r.rootRunId,
    state: r.state,
    attempts: r.attempts,
    maxAttempts: r.maxAttempts,
    lastError: r.lastError,
    itemCount: r.itemCount,
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
    nextAttemptAt: r.nextAttemptAt.toISOString(),
    deliveredAt: r.deliveredAt ? r.deliveredAt.toISOString() : null,
    ...(r.orphan === true || (r.orphan as unknown) === 't' ? { orphan: true as const } : {})
  }))
  return { captures, nextCursor: rows.length > opts.limit ? rows[opts.limit - 1]!.id : null }
}

/** dead → pending with a fresh budget. False when the org has no dead capture for the run. */
export async function retryDeadCapture(db: Db, orgId: string, runId: string, maxAttempts: number): Promise<boolean> {
  const rows = await db.update(memoryCaptures)
    .set({ state: 'pending', attempts: 0, maxAttempts, nextAttemptAt: sql`now()`, updatedAt: sql`now()`, leaseExpiresAt: null })
    .where(and(eq(memoryCaptures.orgId, orgId), eq(memoryCaptures.runId, runId), eq(memoryCaptures.state, 'dead')))
    .returning({ id: memoryCaptures.id })
  return rows.length === 1
}

/**
 * orphan → delivered | discarded, at most once: the update is conditional on the row still
 * being a delivering orphan (lease expired), so a second resolve or a live delivery is refused.
 */
export async function resolveOrphan(db: Db, orgId: string, runId: string, resolution: 'delivered' | 'discard') {
  const rows = await db.update(memoryCaptures)
    .set(resolution === 'delivered'
      ? { state: 'delivered', deliveredAt: sql`now()`, updatedAt: sql`now()`, leaseExpiresAt: null }
      : { state: 'discarded', updatedAt: sql`now()`, leaseExpiresAt: null })
    .where(and(
      eq(memoryCaptures.orgId, orgId),
      eq(memoryCaptures.runId, runId),
      eq(memoryCaptures.state, 'delivering'),
      sql`${memoryCaptures.leaseExpiresAt} < now()`
    ))
    .returning({ id: memoryCaptures.id, itemCount: memoryCaptures.itemCount, rootRunId: memoryCaptures.rootRunId })
  return rows[0] ?? null
}

/**
 * Tells a run's stream that its capture is in the pool: `memory.captured` with
 * `{runId, rootRunId, itemCount}` and any `extra`. The capture's state is what counts, so
 * an event that cannot be stored is logged, not thrown.
 */
export async function announceCaptured(
  sink: RunEventSink | null,
  log: FastifyBaseLogger,
  capture: { orgId: string; runId: string; rootRunId: string; itemCount: number },
  extra: Record<string, unknown> = {}
): Promise<void> {
  if (!sink) return
  const { orgId, runId, rootRunId, itemCount } = capture
  await sink.emit({ orgId, runId, type: 'memory.captured', data: { runId, rootRunId, itemCount, ...extra } })
    .catch((err: unknown) => log.warn({ err, runId }, 'memory.captured event not stored'))
}

export interface WorkerOptions {
  db: Db
  backend: MemoryBackend
  log: FastifyBaseLogger
  /** the org's pool for a capture, created on first write; null when memory is off for the org */
  poolFor: (orgId: string) => Promise<PoolRef | null>
  sink: () => RunEventSink | null
  leaseMs: number
  backoffMs: number
  backoffMaxMs: number
  pollMs: number
  batch: number
  concurrency: number
}

interface Claimed {
  id: string
  org_id: string
  run_id: string
  root_run_id: string
  attempts: number
  max_attempts: number
  facts: string[] | string
}

export interface CaptureWorker {
  start(): void
  /** stops claiming and waits for the deliveries in flight */
  stop(): Promise<void>
  /** a crash: stops at once, abandons deliveries in flight without recording anything */
  kill(): void
  /** looks for work now instead of at the next poll */
  wake(): void
  /** one claim-and-deliver round (tests and benchmarks drive it by hand); how many were claimed */
  runOnce(): Promise<number>
}

/** Exponential backoff with equal jitter: attempt n waits between d/2 and d, d = base·2^(n−1). */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, random = Math.random): number {
  const d = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1))
  return Math.round(d / 2 + random() * (d / 2))
}

/**
 * Delivers pending captures to the pool. Rows are claimed in batches with
 * `FOR UPDATE SKIP LOCKED` and a lease, so any number of workers share the outbox; every
 * later move is conditional on state and attempt number, so a stale worker finishing late
 * changes nothing. A delivering row whose lease expires is an orphan and is never claimed
 * again by a worker: only a person resolves it.
 */
export function createCaptureWorker(opts: WorkerOptions): CaptureWorker {
  const { db, log } = opts
  let running = false
  let killed = false
  let timer: NodeJS.Timeout | null = null
  let loop: Promise<void> | null = null
  const abort = new AbortController()

  async function claim(): Promise<Claimed[]> {
    const result = await db.execute(sql`
      update memory_captures c
      set state = 'delivering', attempts = c.attempts + 1, updated_at = now(),
          lease_expires_at = now() + make_interval(secs => ${opts.leaseMs / 1000})
      where c.id in (
        select id from memory_captures
        where state = 'pending' and next_attempt_at <= now()
        order by next_attempt_at
        limit ${opts.batch}
        for update skip locked)
      returning c.id, c.org_id, c.run_id, c.root_run_id, c.attempts, c.max_attempts, c.facts`)
    return rowsOf<Claimed>(result)
  }

  /** A conditional move of one claimed row; false when it moved on (resolved, or a newer claim). */
  async function settle(row: Claimed, set: SQL): Promise<boolean> {
    if (killed) return false
    const result = await db.execute(sql`
      update memory_captures set ${set}, updated_at = now()
      where id = ${row.id} and state = 'delivering' and attempts = ${row.attempts}
      returning id`)
    return rowsOf(result).length === 1
  }

  async function deliverOne(row: Claimed, poolFor: (orgId: string) => Promise<PoolRef | null>): Promise<void> {
    const facts: string[] = typeof row.facts === 'string' ? JSON.parse(row.facts) : row.facts
    let delivered = false
    try {
      const pool = await poolFor(row.org_id)
      if (!pool) throw new PoolWriteError('memory is disabled for this org', { permanent: true })
      await opts.backend.deliver(pool, { captureId: row.id, runId: row.run_id, rootRunId: row.root_run_id, facts }, async (exec) => {
        if (killed) return false
        const result = await exec.execute(sql`
          update memory_captures
          set state = 'delivered', delivered_at = now(), updated_at = now(), lease_expires_at = null, last_error = null
          where id = ${row.id} and state = 'delivering' and attempts = ${row.attempts}
          returning id`)
        delivered = rowsOf(result).length === 1
        return delivered
      }, abort.signal)
    } catch (err) {
      if (killed) return
      const failure = err instanceof PoolWriteError ? err : new PoolWriteError((err as Error).message)
      if (failure.unknownOutcome) {
        // The write may have happened: leave the row delivering so it becomes an orphan.
        await settle(row, sql`last_error = ${failure.message}`)
      } else if (failure.permanent || row.attempts >= row.max_attempts) {
        await settle(row, sql`state = 'dead', last_error = ${failure.message}, lease_expires_at = null`)
      } else {
        const delay = backoffDelay(row.attempts, opts.backoffMs, opts.backoffMaxMs)
        await settle(row, sql`state = 'pending', last_error = ${failure.message}, lease_expires_at = null,
          next_attempt_at = now() + make_interval(secs => ${delay / 1000})`)
      }
      log.warn({ captureId: row.id, runId: row.run_id, attempt: row.attempts, err: failure.message }, 'memory capture delivery failed')
      return
    }
    if (delivered) await emitDelivered(row, facts.length)
  }

  async function emitDelivered(row: Claimed, itemCount: number) {
    await announceCaptured(opts.sink(), log, { orgId: row.org_id, runId: row.run_id, rootRunId: row.root_run_id, itemCount })
  }

  /**
   * Where the pool can take many captures in one transaction (postgres), the whole round is
   * one write; the rows it did not deliver (and every row, if it fails) go one by one.
   */
  async function deliverBatch(rows: Claimed[], poolFor: (orgId: string) => Promise<PoolRef | null>): Promise<Claimed[]> {
    const batchable = opts.backend.deliverBatch
    if (!batchable || rows.length < 2) return rows
    const entries: Array<{ row: Claimed; pool: PoolRef; facts: string[] }> = []
    const rest: Claimed[] = []
    for (const row of rows) {
      const pool = await poolFor(row.org_id).catch(() => null)
      if (pool) entries.push({ row, pool, facts: typeof row.facts === 'string' ? JSON.parse(row.facts) : row.facts })
      else rest.push(row)
    }
    if (entries.length === 0) return rows
    let owned: Set<string>
    try {
      owned = await batchable(entries.map((e) => ({ pool: e.pool, capture: { captureId: e.row.id, runId: e.row.run_id, rootRunId: e.row.root_run_id, facts: e.facts } })), async (tx) => {
        if (killed) return new Set()
        const result = await tx.execute(sql`
          update memory_captures c
          set state = 'delivered', delivered_at = now(), updated_at = now(), lease_expires_at = null, last_error = null
          from unnest(array[${sql.join(entries.map((e) => sql`${e.row.id}`), sql`, `)}]::text[],
                      array[${sql.join(entries.map((e) => sql`${e.row.attempts}`), sql`, `)}]::int[]) as b(id, attempts)
          where c.id = b.id and c.state = 'delivering' and c.attempts = b.attempts
          returning c.id`)
        return new Set(rowsOf<{ id: string }>(result).map((r) => r.id))
      })
    } catch (err) {
      if (killed) return []
      log.warn({ err }, 'batched capture delivery failed; delivering one by one')
      return rows
    }
    // one event per delivered run, `concurrency` at a time: one by one they cost more than the batch
    const delivered = entries.filter((e) => owned.has(e.row.id))
    let next = 0
    await Promise.all(Array.from({ length: Math.min(Math.max(1, opts.concurrency), delivered.length) }, async () => {
      while (next < delivered.length) {
        const e = delivered[next++]!
        await emitDelivered(e.row, e.facts.length)
      }
    }))
    return rest
  }

  async function runOnce(): Promise<number> {
    const claimed = await claim()
    // one pool lookup per org per round, not per capture
    const pools = new Map<string, Promise<PoolRef | null>>()
    const poolFor = (orgId: string) => {
      let pool = pools.get(orgId)
      if (!pool) pools.set(orgId, (pool = opts.poolFor(orgId)))
      return pool
    }
    const rows = await deliverBatch(claimed, poolFor)
    let next = 0
    const lanes = Array.from({ length: Math.min(opts.concurrency, rows.length) }, async () => {
      while (next < rows.length && !killed) {
        const row = rows[next++]!
        await deliverOne(row, poolFor).catch((err: unknown) => log.error({ err, captureId: row.id }, 'memory capture delivery crashed'))
      }
    })
    await Promise.all(lanes)
    return claimed.length
  }

  function schedule(ms: number) {
    if (!running || killed) return
    if (timer) clearTimeout(timer)
    timer = setTimeout(() => {
      timer = null
      if (loop || !running) return
      loop = runOnce()
        .catch((err: unknown) => {
          if (running) log.error({ err }, 'memory capture worker round failed')
          return 0
        })
        .then((n) => {
          loop = null
          schedule(n >= opts.batch ? 0 : opts.pollMs)
        })
    }, ms)
    timer.unref()
  }

  return {
    start() {
      if (running || killed) return
      running = true
      schedule(0)
    },
    async stop() {
      running = false
      if (timer) clearTimeout(timer)
      timer = null
      if (loop) await loop
    },
    kill() {
      killed = true
      running = false
      if (timer) clearTimeout(timer)
      timer = null
      abort.abort()
    },
    wake() {
      if (running && !loop) schedule(0)
    },
    runOnce
  }
}
