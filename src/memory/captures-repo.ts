import { and, eq, sql, type SQL } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { boolOf, isoOf, isoOrNull } from '../db/rows.js'
import type { RunRef } from '../runs/ports/memory.js'
import { contentHash } from './backend.js'
import { memoryCaptures, type CaptureFact } from './tables.js'

// The capture outbox's rows: writing one with the run that finished, listing
// them, and the people's retry and resolve; the delivery loop is ./capture-worker.ts.

/** The most facts one capture keeps, and the longest fact. */
export const MAX_FACTS = 100
export const MAX_FACT_CHARS = 4000

/** A captured fact's text. */
export const factContent = (fact: CaptureFact): string => (typeof fact === 'string' ? fact : fact.content)

/**
 * Facts trimmed and cut to MAX_FACT_CHARS, empty ones dropped, one of each per pool (the
 * same text after trimming and case folding, contentHash), at most MAX_FACTS.
 */
export function cleanFacts(facts: readonly CaptureFact[]): CaptureFact[] {
  const seen = new Set<string>()
  const kept: CaptureFact[] = []
  for (const fact of facts) {
    const content = factContent(fact).trim().slice(0, MAX_FACT_CHARS)
    if (content === '') continue
    const key = `${typeof fact === 'string' ? '' : fact.owner}\n${contentHash(content)}`
    if (seen.has(key)) continue
    seen.add(key)
    kept.push(typeof fact === 'string' ? content : { ...fact, content })
    if (kept.length === MAX_FACTS) break
  }
  return kept
}

/** Writes the run's capture row (pending) with the caller's transaction; one row per run. */
export async function enqueueCaptureRow(tx: Tx, run: RunRef, facts: CaptureFact[], maxAttempts: number): Promise<void> {
  await tx
    .insert(memoryCaptures)
    .values({
      id: newId(),
      orgId: run.orgId,
      runId: run.id,
      rootRunId: run.rootRunId,
      state: 'pending',
      maxAttempts,
      itemCount: facts.length,
      facts
    })
    .onConflictDoNothing()
}

export interface CaptureView {
  runId: string
  rootRunId: string
  state: string
  attempts: number
  maxAttempts: number
  lastError: string | null
  itemCount: number
  addedCount: number | null
  mergedCount: number | null
  createdAt: string
  updatedAt: string
  nextAttemptAt: string
  deliveredAt: string | null
  orphan?: true
}

/** The org's capture rows, newest first; orphans (delivering, lease expired) are marked. */
export async function listCaptures(
  db: Db,
  orgId: string,
  opts: { limit: number; cursor?: string | undefined; state?: string | undefined }
) {
  const list = keyset(memoryCaptures.id, 'desc', opts)
  const where: SQL[] = [eq(memoryCaptures.orgId, orgId)]
  if (list.after) where.push(list.after)
  if (opts.state) where.push(eq(memoryCaptures.state, opts.state as 'pending'))
  const rows = await db
    .select({
      id: memoryCaptures.id,
      runId: memoryCaptures.runId,
      rootRunId: memoryCaptures.rootRunId,
      state: memoryCaptures.state,
      attempts: memoryCaptures.attempts,
      maxAttempts: memoryCaptures.maxAttempts,
      lastError: memoryCaptures.lastError,
      itemCount: memoryCaptures.itemCount,
      addedCount: memoryCaptures.addedCount,
      mergedCount: memoryCaptures.mergedCount,
      createdAt: memoryCaptures.createdAt,
      updatedAt: memoryCaptures.updatedAt,
      nextAttemptAt: memoryCaptures.nextAttemptAt,
      deliveredAt: memoryCaptures.deliveredAt,
      orphan: sql<boolean>`(${memoryCaptures.state} = 'delivering' and ${memoryCaptures.leaseExpiresAt} < now())`
    })
    .from(memoryCaptures)
    .where(and(...where))
    .orderBy(list.orderBy)
    .limit(list.limit)
  const page = list.page(rows)
  const captures: CaptureView[] = page.items.map((r) => ({
    runId: r.runId,
    rootRunId: r.rootRunId,
    state: r.state,
    attempts: r.attempts,
    maxAttempts: r.maxAttempts,
    lastError: r.lastError,
    itemCount: r.itemCount,
    addedCount: r.addedCount,
    mergedCount: r.mergedCount,
    createdAt: isoOf(r.createdAt),
    updatedAt: isoOf(r.updatedAt),
    nextAttemptAt: isoOf(r.nextAttemptAt),
    deliveredAt: isoOrNull(r.deliveredAt),
    ...(boolOf(r.orphan) ? { orphan: true as const } : {})
  }))
  return { captures, nextCursor: page.nextCursor }
}

/** dead → pending with a fresh budget. False when the org has no dead capture for the run. */
export async function retryDeadCapture(db: Db, orgId: string, runId: string, maxAttempts: number): Promise<boolean> {
  const rows = await db
    .update(memoryCaptures)
    .set({
      state: 'pending',
      attempts: 0,
      maxAttempts,
      nextAttemptAt: sql`now()`,
      updatedAt: sql`now()`,
      leaseExpiresAt: null
    })
    .where(and(eq(memoryCaptures.orgId, orgId), eq(memoryCaptures.runId, runId), eq(memoryCaptures.state, 'dead')))
    .returning({ id: memoryCaptures.id })
  return rows.length === 1
}

/**
 * orphan → delivered | discarded, at most once: the update is conditional on the row still
 * being a delivering orphan (lease expired), so a second resolve or a live delivery is refused.
 */
export async function resolveOrphan(db: Db, orgId: string, runId: string, resolution: 'delivered' | 'discard') {
  const rows = await db
    .update(memoryCaptures)
    .set(
      resolution === 'delivered'
        ? { state: 'delivered', deliveredAt: sql`now()`, updatedAt: sql`now()`, leaseExpiresAt: null }
        : { state: 'discarded', updatedAt: sql`now()`, leaseExpiresAt: null }
    )
    .where(
      and(
        eq(memoryCaptures.orgId, orgId),
        eq(memoryCaptures.runId, runId),
        eq(memoryCaptures.state, 'delivering'),
        sql`${memoryCaptures.leaseExpiresAt} < now()`
      )
    )
    .returning({ id: memoryCaptures.id, itemCount: memoryCaptures.itemCount, rootRunId: memoryCaptures.rootRunId })
  return rows[0] ?? null
}
