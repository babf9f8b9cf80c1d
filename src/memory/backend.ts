import { createHash } from 'node:crypto'
import type { Db, Tx } from '../db/client.js'
import type { Scores, SearchMode } from '../retrieval/fusion.js'
import type { PoolSearch } from '../retrieval/search.js'

/** A pool's identity, resolved from the principal (never from the client). */
export interface PoolRef {
  id: string
  orgId: string
  scope: 'org' | 'personal'
  /** '' for the org pool, the real user's id for a personal pool */
  ownerKey: string
}

export interface SearchHit {
  id: string
  content: string
  score: number
  /** each ranking's score (null: that side did not find it) and the fused one */
  scores: Scores
  runId: string | null
  rootRunId: string | null
  createdAt: string
}

export interface BrowseItem {
  id: string
  content: string
  background: boolean
  sourceRunId: string | null
  createdAt: string
  updatedAt: string
}

export interface HistoryEntry {
  content: string
  changedBy: string
  changedAt: string
  kind: 'created' | 'updated' | 'deleted'
}

export interface CaptureDelivery {
  captureId: string
  runId: string
  rootRunId: string
  facts: string[]
  /** each fact's index in its capture (a capture split over pools); 0, 1, … when absent */
  indexes?: number[] | undefined
}

/**
 * Marks the capture delivered (a conditional update on state and attempt number); false
 * when the row moved on meanwhile (a stale worker), in which case nothing may be kept.
 */
export type MarkDelivered = (exec: Db | Tx) => Promise<boolean>

export interface BatchEntry {
  pool: PoolRef
  capture: CaptureDelivery
}

/** Marks many captures delivered at once (conditionally); answers the capture ids still owned. */
export type MarkBatchDelivered = (exec: Tx) => Promise<Set<string>>

/** A pool write failed. `permanent` (4xx, unparseable answer) sends the capture dead at once. */
export class PoolWriteError extends Error {
  readonly permanent: boolean
  /** the request may have reached the pool: the outcome is unknown, so never retry by itself */
  readonly unknownOutcome: boolean
  constructor(message: string, options: { permanent?: boolean; unknownOutcome?: boolean } = {}) {
    super(message)
    this.name = 'PoolWriteError'
    this.permanent = options.permanent ?? false
    this.unknownOutcome = options.unknownOutcome ?? false
  }
}

/** One interface over every place facts can live. */
export interface MemoryBackend {
  readonly name: 'postgres' | 'http'
  /**
   * `anyWord`: the query is a recall's significant words (recall.ts), most significant
   * first; a fact matching any of them counts, ranked by how many it matches and how well.
   */
  search(
    pool: PoolRef,
    query: string,
    limit: number,
    options?: {
      anyWord?: boolean | undefined
      /** how to rank (the postgres backend: src/retrieval/search.ts); absent: hybrid where vectors exist */
      mode?: SearchMode | undefined
      /** the text whose meaning is searched, when not `query` (a recall: the whole prompt) */
      meaning?: string | undefined
    }
  ): Promise<{ items: SearchHit[]; truncated: boolean; mode: SearchMode }>
  /**
   * A person's search of the pool they name (the postgres backend): the org's memory switch,
   * the pool and the ranking in one statement (retrieval's searchPool), recent answers kept
   * as search's are.
   */
  searchAs?(
    where: { orgId: string; scope: 'org' | 'personal'; ownerKey: string },
    query: string,
    limit: number,
    options?: { mode?: SearchMode | undefined }
  ): Promise<PoolSearch>
  /** throws `400 validation_failed` for a browse cursor this backend never hands out */
  checkCursor(cursor: string): void
  browse(
    pool: PoolRef,
    limit: number,
    cursor: string | undefined
  ): Promise<{ items: BrowseItem[]; total: number; nextCursor: string | null }>
  /** whether the id is an item of this pool */
  exists(pool: PoolRef, id: string): Promise<boolean>
  /** a fact added by a person; a conflict (409) when the pool already holds it */
  add(pool: PoolRef, content: string, changedBy: string): Promise<BrowseItem>
  /** false when the id is not an item of this pool */
  update(pool: PoolRef, id: string, content: string, changedBy: string): Promise<boolean>
  /** how many items went (0: none of this pool had that id) */
  remove(pool: PoolRef, id: string, changedBy: string): Promise<number>
  /** null when the pool never had that id */
  history(pool: PoolRef, id: string): Promise<HistoryEntry[] | null>
  /** writes a capture's facts; throws PoolWriteError; calls markDelivered once the write is kept */
  deliver(pool: PoolRef, capture: CaptureDelivery, markDelivered: MarkDelivered, signal?: AbortSignal): Promise<void>
  /** many captures in one write, where the pool can (the postgres backend: one transaction) */
  deliverBatch?(entries: BatchEntry[], markDelivered: MarkBatchDelivered): Promise<Set<string>>
}

/** Facts that differ only in case and spacing are the same fact. */
export function contentHash(content: string): string {
  return createHash('sha256').update(content.normalize('NFKC').trim().replace(/\s+/g, ' ').toLowerCase()).digest('hex')
}
