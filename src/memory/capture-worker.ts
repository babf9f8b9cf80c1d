import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, type Db } from '../db/client.js'
import { jsonOf } from '../db/rows.js'
import type { RunEventSink } from '../runs/memory-port.js'
import { PoolWriteError, type MemoryBackend, type PoolRef } from './backend.js'

/**
 * Tells a run's stream that its capture is in the pool: `memory.captured` with
 * `{runId, rootRunId, itemCount}` and any `extra`. The capture's state is what counts, so
 * an event that cannot be stored is logged, not thrown.
 */
export async function announceCaptured(
  events: RunEventSink,
  log: FastifyBaseLogger,
  capture: { orgId: string; runId: string; rootRunId: string; itemCount: number },
  extra: Record<string, unknown> = {}
): Promise<void> {
  const { orgId, runId, rootRunId, itemCount } = capture
  await events.emit({ orgId, runId, type: 'memory.captured', data: { runId, rootRunId, itemCount, ...extra } })
    .catch((err: unknown) => log.warn({ err, runId }, 'memory.captured event not stored'))
}

export interface CaptureWorkerOptions {
  db: Db
  backend: MemoryBackend
  log: FastifyBaseLogger
  /** the org's pool for a capture, created on first write; null when memory is off for the org */
  poolFor: (orgId: string) => Promise<PoolRef | null>
  /** where `memory.captured` goes (the runs group's event sink) */
  events: RunEventSink
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
export function createCaptureWorker(opts: CaptureWorkerOptions): CaptureWorker {
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
    const facts = jsonOf<string[]>(row.facts)
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
    await announceCaptured(opts.events, log, { orgId: row.org_id, runId: row.run_id, rootRunId: row.root_run_id, itemCount })
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
      if (pool) entries.push({ row, pool, facts: jsonOf<string[]>(row.facts) })
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
