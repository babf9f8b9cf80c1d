import { setTimeout as sleep } from 'node:timers/promises'
import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, withinTime, type Db, type Tx } from '../db/client.js'
import { failureSentence, isDatabaseUnavailable } from '../db/faults.js'
import { jsonOf } from '../db/rows.js'
import type { RunEventSink } from '../runs/ports/memory.js'
import { PoolWriteError, type MemoryBackend, type PoolRef } from './backend.js'
import { factContent } from './captures-repo.js'
import { backoffDelay, createWorkerLoop } from '../worker-loop.js'
import type { CaptureFact } from './tables.js'
import { observeCaptures } from '../telemetry/captures.js'

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
  await events
    .emit({ orgId, runId, type: 'memory.captured', data: { runId, rootRunId, itemCount, ...extra } })
    .catch((err: unknown) => log.warn({ err, runId, orgId }, 'memory.captured event not stored'))
}

export interface CaptureWorkerOptions {
  db: Db
  backend: MemoryBackend
  log: FastifyBaseLogger
  /**
   * a pool of the org for a capture (the org pool, or a person's: `owner`), created on first write; null when memory is
   * off for the org
   */
  poolFor: (orgId: string, owner: string | null) => Promise<PoolRef | null>
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
  facts: CaptureFact[] | string
}

type PoolFor = (orgId: string, owner: string | null) => Promise<PoolRef | null>

/** A capture's facts split by pool, each with its index in the capture. */
interface PoolPart {
  pool: PoolRef
  facts: string[]
  indexes: number[]
}

/** The capture's facts by pool (the org pool first); null when a pool is unavailable (memory off). */
async function partsOf(row: Claimed, poolFor: PoolFor): Promise<PoolPart[] | null> {
  const facts = jsonOf<CaptureFact[]>(row.facts)
  const byOwner = new Map<string, { facts: string[]; indexes: number[] }>()
  facts.forEach((fact, index) => {
    const owner = typeof fact === 'string' ? '' : fact.owner
    let part = byOwner.get(owner)
    if (!part) byOwner.set(owner, (part = { facts: [], indexes: [] }))
    part.facts.push(factContent(fact))
    part.indexes.push(index)
  })
  const parts: PoolPart[] = []
  for (const owner of [...byOwner.keys()].sort()) {
    const pool = await poolFor(row.org_id, owner === '' ? null : owner)
    if (!pool) return null
    parts.push({ pool, ...byOwner.get(owner)! })
  }
  return parts
}

export interface CaptureWorker {
  start(): void
  /** stops claiming and waits for the deliveries in flight, at most `deadlineMs` (the rest is left to its lease) */
  stop(deadlineMs?: number): Promise<void>
  /** a crash: stops at once, abandons deliveries in flight without recording anything */
  kill(): void
  /** looks for work now instead of at the next poll */
  wake(): void
  /** one claim-and-deliver round (tests and benchmarks drive it by hand); how many were claimed */
  runOnce(): Promise<number>
}

/** The longest wait for one try of a move while the database may be away. */
export const SETTLE_TIMEOUT_MS = 5000

/** Why a capture left `delivering` without an answer: its worker stopped, crashed or lost the database. */
const STOPPED_MIDWAY = 'the delivery stopped before it finished (its worker stopped or lost the database)'

/**
 * Delivers pending captures to the pool. Rows are claimed in batches with
 * `FOR UPDATE SKIP LOCKED` and a lease, so any number of workers share the outbox; every
 * later move is conditional on state and attempt number, so a stale worker finishing late
 * changes nothing.
 *
 * A delivering row whose lease expires: with the postgres backend the capture's facts and
 * its `delivered` state commit in one transaction, so a row still delivering was not
 * delivered; it goes back to pending (or dead, its attempts spent), unless facts of the
 * capture are found, when it is delivered. With the http backend the write may have reached
 * the memory service, so the row is an orphan a person resolves.
 *
 * An attempt that failed only because the database went away is put back to pending (the
 * move is tried again, with backoff, until the database answers or the worker stops).
 */
export function createCaptureWorker(opts: CaptureWorkerOptions): CaptureWorker {
  const { db, log } = opts
  let killed = false
  let stopping = false
  const abort = new AbortController()
  /** cut short the waits between tries of a move while the database is away (stop, kill) */
  const pause = new AbortController()
  /** the postgres backend writes facts and the delivered mark in one transaction: its outcome is known */
  const outcomeKnown = opts.backend.name === 'postgres'

  /** Postgres backend: delivering rows whose lease passed, moved on by what the database shows. */
  async function recoverExpired(): Promise<void> {
    if (!outcomeKnown) return
    await db.execute(sql`
      update memory_captures c
      set state = case when exists (select 1 from memory_items i where i.capture_id = c.id) then 'delivered'
                       when c.attempts >= c.max_attempts then 'dead' else 'pending' end,
          delivered_at = case when exists (select 1 from memory_items i where i.capture_id = c.id) then now() end,
          last_error = case when exists (select 1 from memory_items i where i.capture_id = c.id) then null
                            else coalesce(c.last_error, ${STOPPED_MIDWAY}) end,
          lease_expires_at = null, next_attempt_at = now(), updated_at = now()
      where c.state = 'delivering' and c.lease_expires_at < now()`)
  }

  async function claim(): Promise<Claimed[]> {
    await recoverExpired()
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

  /**
   * A conditional move of one claimed row; false when it moved on (resolved, or a newer
   * claim). While the database is unavailable the move is tried again with backoff until it
   * answers; a stop or a crash gives up (the lease, or a person, settles the row then).
   */
  async function settle(row: Claimed, set: SQL): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      if (killed) return false
      try {
        // bounded: a statement sent as the connection died can wait forever (the move is idempotent)
        const result = await withinTime(
          db.execute(sql`
          update memory_captures set ${set}, updated_at = now()
          where id = ${row.id} and state = 'delivering' and attempts = ${row.attempts}
          returning id`),
          SETTLE_TIMEOUT_MS
        )
        return rowsOf(result).length === 1
      } catch (err) {
        if (!isDatabaseUnavailable(err) || stopping || killed) throw err
        await sleep(backoffDelay(attempt, opts.backoffMs, opts.backoffMaxMs), undefined, {
          signal: pause.signal,
          ref: false
        }).catch(() => {})
      }
    }
  }

  async function deliverOne(row: Claimed, poolFor: PoolFor): Promise<void> {
    let delivered = false
    let itemCount = 0
    /** whether the write may have left for the pool */
    let sent = false
    try {
      const parts = await partsOf(row, poolFor)
      if (!parts) throw new PoolWriteError('memory is disabled for this org', { permanent: true })
      itemCount = parts.reduce((n, p) => n + p.facts.length, 0)
      const markDelivered = async (exec: Db | Tx) => {
        if (killed) return false
        const result = await exec.execute(sql`
          update memory_captures
          set state = 'delivered', delivered_at = now(), updated_at = now(), lease_expires_at = null, last_error = null
          where id = ${row.id} and state = 'delivering' and attempts = ${row.attempts}
          returning id`)
        delivered = rowsOf(result).length === 1
        return delivered
      }
      const delivery = (part: PoolPart) => ({
        captureId: row.id,
        runId: row.run_id,
        rootRunId: row.root_run_id,
        facts: part.facts,
        indexes: part.indexes
      })
      sent = true
      if (parts.length > 1 && opts.backend.deliverBatch) {
        // facts for several pools (the org's and a person's): one transaction where the pool can
        await opts.backend.deliverBatch(
          parts.map((part) => ({ pool: part.pool, capture: delivery(part) })),
          async (tx) => new Set((await markDelivered(tx)) ? [row.id] : [])
        )
      } else {
        // elsewhere pool by pool, the capture marked delivered with the last
        for (const [i, part] of parts.entries()) {
          const last = i === parts.length - 1
          await opts.backend.deliver(
            part.pool,
            delivery(part),
            last ? markDelivered : async () => !killed,
            abort.signal
          )
        }
      }
    } catch (err) {
      if (killed) return
      // a sentence for lastError and the log line: never the failed query, its values or a server's address
      // (errors other than PoolWriteError come from this database: the pool lookup, the postgres pool, recording)
      const lostDatabase = !(err instanceof PoolWriteError) && isDatabaseUnavailable(err)
      const reason = lostDatabase ? 'the database was unavailable' : failureSentence(err)
      log.warn(
        { captureId: row.id, runId: row.run_id, orgId: row.org_id, attempt: row.attempts, err },
        `memory capture delivery failed: ${reason}`
      )
      if (lostDatabase && sent && !outcomeKnown) {
        // the memory service took the capture, then the database went away: the write happened
        // but is not recorded here, so a person resolves it (never sent twice by itself)
        await settle(
          row,
          sql`last_error = ${`${reason} after the memory service took the capture; resolve it as delivered`}`
        )
      } else if (lostDatabase) {
        // nothing was kept (postgres: the facts roll back with the delivered mark): deliver again,
        // without spending the attempt
        const delay = backoffDelay(row.attempts, opts.backoffMs, opts.backoffMaxMs)
        await settle(
          row,
          sql`state = 'pending', attempts = attempts - 1, last_error = ${reason}, lease_expires_at = null,
          next_attempt_at = now() + make_interval(secs => ${delay / 1000})`
        )
      } else if (err instanceof PoolWriteError && err.unknownOutcome) {
        // The write may have happened: leave the row delivering so it becomes an orphan.
        await settle(row, sql`last_error = ${reason}`)
      } else if ((err instanceof PoolWriteError && err.permanent) || row.attempts >= row.max_attempts) {
        await settle(row, sql`state = 'dead', last_error = ${reason}, lease_expires_at = null`)
      } else {
        const delay = backoffDelay(row.attempts, opts.backoffMs, opts.backoffMaxMs)
        await settle(
          row,
          sql`state = 'pending', last_error = ${reason}, lease_expires_at = null,
          next_attempt_at = now() + make_interval(secs => ${delay / 1000})`
        )
      }
      return
    }
    if (delivered) await emitDelivered(row, itemCount)
  }

  async function emitDelivered(row: Claimed, itemCount: number) {
    await announceCaptured(opts.events, log, {
      orgId: row.org_id,
      runId: row.run_id,
      rootRunId: row.root_run_id,
      itemCount
    })
  }

  /**
   * Where the pool can take many captures in one transaction (postgres), the whole round is
   * one write; the rows it did not deliver (and every row, if it fails) go one by one.
   */
  async function deliverBatch(rows: Claimed[], poolFor: PoolFor): Promise<Claimed[]> {
    const batchable = opts.backend.deliverBatch
    if (!batchable || rows.length < 2) return rows
    const entries: Array<{ row: Claimed; parts: PoolPart[]; itemCount: number }> = []
    const rest: Claimed[] = []
    for (const row of rows) {
      const parts = await partsOf(row, poolFor).catch(() => null)
      if (parts) entries.push({ row, parts, itemCount: parts.reduce((n, p) => n + p.facts.length, 0) })
      else rest.push(row)
    }
    if (entries.length === 0) return rows
    let owned: Set<string>
    try {
      const batch = entries.flatMap((e) =>
        e.parts.map((part) => ({
          pool: part.pool,
          capture: {
            captureId: e.row.id,
            runId: e.row.run_id,
            rootRunId: e.row.root_run_id,
            facts: part.facts,
            indexes: part.indexes
          }
        }))
      )
      owned = await batchable(batch, async (tx) => {
        if (killed) return new Set()
        const result = await tx.execute(sql`
          update memory_captures c
          set state = 'delivered', delivered_at = now(), updated_at = now(), lease_expires_at = null, last_error = null
          from unnest(array[${sql.join(
            entries.map((e) => sql`${e.row.id}`),
            sql`, `
          )}]::text[],
                      array[${sql.join(
                        entries.map((e) => sql`${e.row.attempts}`),
                        sql`, `
                      )}]::int[]) as b(id, attempts)
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
    await Promise.all(
      Array.from({ length: Math.min(Math.max(1, opts.concurrency), delivered.length) }, async () => {
        while (next < delivered.length) {
          const e = delivered[next++]!
          await emitDelivered(e.row, e.itemCount)
        }
      })
    )
    return rest
  }

  /** Delivers one round's claimed captures: in one batch where the pool can, else `concurrency` at a time. */
  async function deliverRound(claimed: Claimed[]): Promise<void> {
    // one pool lookup per org per round, not per capture
    const pools = new Map<string, Promise<PoolRef | null>>()
    const poolFor: PoolFor = (orgId, owner) => {
      const key = `${orgId}/${owner ?? ''}`
      let pool = pools.get(key)
      if (!pool) pools.set(key, (pool = opts.poolFor(orgId, owner)))
      return pool
    }
    const rows = await deliverBatch(claimed, poolFor)
    let next = 0
    const lanes = Array.from({ length: Math.min(opts.concurrency, rows.length) }, async () => {
      while (next < rows.length && !killed) {
        const row = rows[next++]!
        await deliverOne(row, poolFor).catch((err: unknown) =>
          log.error({ err, captureId: row.id }, 'memory capture delivery crashed')
        )
      }
    })
    await Promise.all(lanes)
  }

  async function runOnce(): Promise<number> {
    const claimed = await claim()
    await deliverRound(claimed)
    return claimed.length
  }

  // a round is a batch: a full one suggests more is due at once, else the poll; the database away backs off
  const loop = createWorkerLoop<Claimed[]>({
    name: 'memory capture worker',
    log,
    claim: async () => {
      const rows = await claim()
      return rows.length > 0 ? rows : null
    },
    // each capture a span in the trace of its run
    work: (rows) => observeCaptures(db, rows, () => deliverRound(rows)),
    claimAgain: (rows) => rows.length >= opts.batch,
    pollMs: opts.pollMs,
    backoff: { baseMs: opts.backoffMs, maxMs: opts.backoffMaxMs },
    drain: 'finish'
  })

  return {
    start: () => loop.start(),
    async stop(deadlineMs) {
      stopping = true
      pause.abort()
      await loop.stop(deadlineMs)
    },
    kill() {
      killed = true
      abort.abort()
      pause.abort()
      loop.kill()
    },
    wake: () => loop.wake(),
    runOnce
  }
}
