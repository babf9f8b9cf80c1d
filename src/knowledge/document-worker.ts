import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { BlobStore } from '../artifacts/blob-store.js'
import { rowsOf, withinTime, type Db } from '../db/client.js'
import { failureSentence, isDatabaseUnavailable } from '../db/faults.js'
import { newId } from '../db/ids.js'
import { SETTLE_TIMEOUT_MS } from '../memory/capture-worker.js'
import { backoffDelay, createWorkerLoop, type Clock } from '../worker-loop.js'
import { chunkMarkdown, type Chunk } from './chunk.js'
import { ExtractionFailed, type DocumentKind } from './extract.js'
import { bumpGeneration } from './generation.js'
import { addWords } from './records-repo.js'

/** Turns a document's bytes into Markdown (extract.ts in the service; a fake in tests). */
export type Extractor = (bytes: Uint8Array, kind: DocumentKind, signal: AbortSignal) => Promise<string>

export interface DocumentWorkerOptions {
  db: Db
  store: BlobStore
  log: FastifyBaseLogger
  extract: Extractor
  /** how long a claim holds a document; renewed every third of it while the worker lives */
  leaseMs: number
  /** how often an idle worker looks for documents (uploads on this instance wake it at once) */
  pollMs: number
  /** documents extracted at once by this instance */
  concurrency: number
  /** the largest chunk, in characters */
  maxChunkChars: number
  /** a failed attempt waits about this long before the next (doubling per attempt, with jitter) */
  backoffMs: number
  /** the longest wait between attempts */
  backoffMaxMs: number
  /** when a document is due again: the time failed attempts back off by (tests move it) */
  clock: Clock
  /** jitter's source (tests pin it) */
  random?: () => number
}

export interface DocumentWorker {
  start(): void
  /**
   * stops claiming, hands the extractions in flight back and waits for that, at most `deadlineMs` (the rest is left to
   * its lease)
   */
  stop(deadlineMs?: number): Promise<void>
  /** looks for work now instead of at the next poll */
  wake(): void
  /** claims and processes at most one document; false when there was none */
  runOnce(): Promise<boolean>
}

interface Claimed {
  id: string
  org_id: string
  kind: DocumentKind
  sha256: string
  attempts: number
  max_attempts: number
}

const CHUNKS_PER_STATEMENT = 500

/**
 * Extracts documents into chunks. A claim is an `UPDATE … FOR UPDATE SKIP LOCKED` with a
 * lease, so any number of instances share the queue; a worker that dies leaves its
 * document to be claimed again when the lease passes, and a document whose attempts are
 * spent is `failed` instead of claimed again, so none stays in `processing`. Every later
 * move names the claim (`lease_owner`, `attempts`): a worker that lost its lease changes
 * nothing. A failed attempt puts the document back with a due time (`next_attempt_at`,
 * exponential backoff with jitter, by the worker's clock); one that failed only because the
 * database went away does not spend the attempt.
 */
export function createDocumentWorker(opts: DocumentWorkerOptions): DocumentWorker {
  const { db, log, clock } = opts
  const random = opts.random ?? Math.random
  const owner = randomUUID()
  /** cut short the waits between tries of a move while the database is away (stop) */
  const pause = new AbortController()
  /** aborts what runOnce() does when the worker stops (the loop aborts its own work) */
  const abort = new AbortController()

  /** Documents whose lease passed with no attempts left: failed, with why. */
  async function failExhausted(): Promise<void> {
    await db.execute(sql`
      update knowledge_documents
      set state = 'failed', lease_owner = null, lease_expires_at = null, updated_at = now(),
          last_error = 'the extraction stopped before it finished (its worker died or lost its lease) on every attempt'
      where state = 'processing' and lease_expires_at < now() and attempts >= max_attempts`)
  }

  async function claim(): Promise<Claimed | null> {
    await failExhausted()
    const rows = rowsOf<Claimed>(
      await db.execute(sql`
      update knowledge_documents d
      set state = 'processing', attempts = d.attempts + 1, lease_owner = ${owner}, updated_at = now(),
          lease_expires_at = now() + make_interval(secs => ${opts.leaseMs / 1000})
      where d.id = (
        select id from knowledge_documents
        where ((state = 'queued' and (attempts = 0 or next_attempt_at <= ${clock.now().toISOString()}::timestamptz)) or (state = 'processing' and lease_expires_at < now()))
          and attempts < max_attempts
        order by created_at, id
        limit 1
        for update skip locked)
      returning d.id, d.org_id, d.kind, d.sha256, d.attempts, d.max_attempts`)
    )
    return rows[0] ?? null
  }

  /**
   * A conditional move of a claimed document; false when the claim is no longer ours. While
   * the database is unavailable it is tried again with backoff until it answers or the
   * worker stops (the lease hands the document on then).
   */
  async function settle(doc: Claimed, set: SQL): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await withinTime(
          db.execute(sql`
          update knowledge_documents set ${set}, lease_owner = null, lease_expires_at = null, updated_at = now()
          where id = ${doc.id} and state = 'processing' and lease_owner = ${owner} and attempts = ${doc.attempts}
          returning id`),
          SETTLE_TIMEOUT_MS
        )
        return rowsOf(result).length === 1
      } catch (err) {
        if (!isDatabaseUnavailable(err) || pause.signal.aborted) throw err
        await sleep(backoffDelay(attempt, opts.backoffMs, opts.backoffMaxMs), undefined, {
          signal: pause.signal,
          ref: false
        }).catch(() => {})
      }
    }
  }

  /** The due time of the next attempt after `attempt` failed. */
  const dueAfter = (attempt: number) =>
    new Date(clock.now().getTime() + backoffDelay(attempt, opts.backoffMs, opts.backoffMaxMs, random)).toISOString()

  async function storeChunks(doc: Claimed, chunks: Chunk[]): Promise<boolean> {
    return db.transaction(async (tx) => {
      const mine = rowsOf(
        await tx.execute(sql`
        select id from knowledge_documents
        where id = ${doc.id} and state = 'processing' and lease_owner = ${owner} and attempts = ${doc.attempts}
        for update`)
      )
      if (mine.length === 0) return false
      await tx.execute(sql`delete from knowledge_chunks where document_id = ${doc.id}`)
      for (let i = 0; i < chunks.length; i += CHUNKS_PER_STATEMENT) {
        const rows = chunks
          .slice(i, i + CHUNKS_PER_STATEMENT)
          .map((c, j) => ({ id: newId(), idx: i + j, heading: c.heading, text: c.text }))
        await tx.execute(sql`
          insert into knowledge_chunks (id, org_id, document_id, idx, heading, text)
          select r.id, ${doc.org_id}, ${doc.id}, r.idx, r.heading, r.text
          from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as r(id text, idx int, heading text, text text)`)
      }
      await addWords(
        tx,
        doc.org_id,
        chunks.flatMap((c) => [c.heading, c.text])
      )
      await bumpGeneration(tx, doc.org_id)
      await tx.execute(sql`
        update knowledge_documents
        set state = 'ready', chunk_count = ${chunks.length}, last_error = null, lease_owner = null, lease_expires_at = null, updated_at = now()
        where id = ${doc.id}`)
      return true
    })
  }

  /** Keeps the leases of the documents in flight; a renewal that finds the claim gone stops caring. */
  async function renewLeases(docs: Claimed[]): Promise<void> {
    await Promise.all(
      docs.map((doc) =>
        db
          .execute(
            sql`
      update knowledge_documents set lease_expires_at = now() + make_interval(secs => ${opts.leaseMs / 1000})
      where id = ${doc.id} and state = 'processing' and lease_owner = ${owner} and attempts = ${doc.attempts}`
          )
          .catch((err: unknown) => log.warn({ err, documentId: doc.id }, 'document lease renewal failed'))
      )
    )
  }

  async function process(doc: Claimed, signal: AbortSignal): Promise<void> {
    /** rejects when the worker stops: what is in flight is handed back, not waited for */
    const stopped = new Promise<never>((_, reject) => {
      if (signal.aborted) reject(signal.reason)
      signal.addEventListener('abort', () => reject(signal.reason), { once: true })
    })
    stopped.catch(() => {})
    /** set while the chunks are written: a connection failure then is the database's */
    let storing = false
    try {
      const bytes = await Promise.race([opts.store.readBytes(doc.org_id, doc.sha256), stopped])
      const markdown = await Promise.race([opts.extract(bytes, doc.kind, signal), stopped])
      const chunks = chunkMarkdown(markdown, opts.maxChunkChars)
      storing = true
      await storeChunks(doc, chunks)
    } catch (err: unknown) {
      if (signal.aborted) {
        // a clean stop hands the document back without spending an attempt
        await settle(doc, sql`state = 'queued', attempts = attempts - 1`).catch(() => {})
        return
      }
      if (err instanceof ExtractionFailed) {
        // the file itself is the problem: trying again would fail the same way
        await settle(doc, sql`state = 'failed', last_error = ${err.message}`)
        log.info({ documentId: doc.id, reason: err.message }, 'document extraction failed')
        return
      }
      // a sentence: never the failed query, its values, a path or a server's address
      const lostDatabase = storing && isDatabaseUnavailable(err)
      const reason = lostDatabase ? 'the database was unavailable' : failureSentence(err)
      const message = `attempt ${doc.attempts} failed: ${reason}`
      log.warn({ err, documentId: doc.id, attempt: doc.attempts }, `document processing failed: ${reason}`)
      if (lostDatabase) {
        // the database went away: nothing was kept (the chunks commit with the ready state); the attempt is not spent
        await settle(
          doc,
          sql`state = 'queued', attempts = attempts - 1, last_error = ${message}, next_attempt_at = ${dueAfter(doc.attempts)}::timestamptz`
        ).catch((e: unknown) => log.warn({ err: e, documentId: doc.id }, 'document left to its lease'))
        return
      }
      await settle(
        doc,
        doc.attempts >= doc.max_attempts
          ? sql`state = 'failed', last_error = ${message}`
          : sql`state = 'queued', last_error = ${message}, next_attempt_at = ${dueAfter(doc.attempts)}::timestamptz`
      ).catch((e: unknown) => log.warn({ err: e, documentId: doc.id }, 'document left to its lease'))
    }
  }

  async function runOnce(): Promise<boolean> {
    const doc = await claim()
    if (!doc) return false
    await process(doc, abort.signal)
    return true
  }

  const loop = createWorkerLoop<Claimed>({
    name: 'document worker',
    log,
    claim,
    work: process,
    concurrency: Math.max(1, opts.concurrency),
    pollMs: opts.pollMs,
    lease: { everyMs: Math.max(50, Math.floor(opts.leaseMs / 3)), renew: renewLeases },
    drain: 'hand-back'
  })

  return {
    start: () => loop.start(),
    async stop(deadlineMs) {
      pause.abort()
      abort.abort(new Error('the document worker stopped'))
      await loop.stop(deadlineMs)
    },
    wake: () => loop.wake(),
    runOnce
  }
}
