import { and, asc, eq } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import type { HistoryEntry, PoolRef } from './backend.js'
import { memoryItemHistory } from './tables.js'

export interface Change {
  itemId: string
  content: string
  kind: 'created' | 'updated' | 'deleted'
}

/** Records item changes with who made them (a user id, `api-key:<id>`, `dev`, or `run:<id>`). */
export async function recordChanges(exec: Db | Tx, pool: PoolRef, changedBy: string, changes: Change[]): Promise<void> {
  if (changes.length === 0) return
  await exec.insert(memoryItemHistory).values(
    changes.map((c) => ({
      id: newId(),
      orgId: pool.orgId,
      poolId: pool.id,
      itemId: c.itemId,
      content: c.content,
      kind: c.kind,
      changedBy
    }))
  )
}

export async function readHistory(db: Db, pool: PoolRef, itemId: string): Promise<HistoryEntry[] | null> {
  const rows = await db
    .select()
    .from(memoryItemHistory)
    .where(
      and(
        eq(memoryItemHistory.orgId, pool.orgId),
        eq(memoryItemHistory.poolId, pool.id),
        eq(memoryItemHistory.itemId, itemId)
      )
    )
    .orderBy(asc(memoryItemHistory.id))
  if (rows.length === 0) return null
  return rows.map((r) => ({
    content: r.content,
    changedBy: r.changedBy,
    changedAt: r.changedAt.toISOString(),
    kind: r.kind
  }))
}
