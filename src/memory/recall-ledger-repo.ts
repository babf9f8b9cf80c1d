import { and, eq, type SQL } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import type { RunRef } from '../runs/ports/memory.js'
import { memoryRecalls } from './tables.js'
import { keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import type { SearchMode } from '../retrieval/fusion.js'

export async function recordRecall(db: Db, run: RunRef, frame: RecallFrame): Promise<void> {
  await recordRecalls(db, run, [frame])
}

/** One recall of a run: a scope searched, what it found, how long it took and how it ranked. */
type RecallFrame = { scope: 'org' | 'personal'; query: string; itemIds: string[]; latencyMs: number; mode: SearchMode }

/** Several recall frames of one run, in one statement. */
export async function recordRecalls(db: Db, run: RunRef, frames: RecallFrame[]): Promise<void> {
  if (frames.length === 0) return
  await db.insert(memoryRecalls).values(
    frames.map((frame) => ({
      id: newId(),
      orgId: run.orgId,
      runId: run.id,
      rootRunId: run.rootRunId,
      scope: frame.scope,
      query: frame.query,
      itemIds: frame.itemIds,
      latencyMs: Math.max(0, Math.round(frame.latencyMs)),
      mode: frame.mode
    }))
  )
}

export interface RecallFilter {
  limit: number
  cursor?: string | undefined
  runId?: string | undefined
  rootRunId?: string | undefined
}

/** The org's frames, newest first; the cursor is the last frame id seen. */
export async function listRecalls(db: Db, orgId: string, filter: RecallFilter) {
  const list = keyset(memoryRecalls.id, 'desc', filter)
  const where: SQL[] = [eq(memoryRecalls.orgId, orgId)]
  if (list.after) where.push(list.after)
  if (filter.runId) where.push(eq(memoryRecalls.runId, filter.runId))
  if (filter.rootRunId) where.push(eq(memoryRecalls.rootRunId, filter.rootRunId))
  const rows = await db
    .select()
    .from(memoryRecalls)
    .where(and(...where))
    .orderBy(list.orderBy)
    .limit(list.limit)
  const page = list.page(rows)
  const recalls = page.items.map((r) => ({
    id: r.id,
    runId: r.runId,
    rootRunId: r.rootRunId,
    scope: r.scope,
    query: r.query,
    itemIds: r.itemIds,
    latencyMs: r.latencyMs,
    mode: r.mode as SearchMode,
    createdAt: isoOf(r.createdAt),
    session: { runId: r.runId, rootRunId: r.rootRunId }
  }))
  return { recalls, nextCursor: page.nextCursor }
}
