import { and, eq, gt, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { keyset, type PageInput } from '../db/paging.js'
import { toolApprovals, type ApprovalStatus } from './tables.js'
import { currentTraceparent } from '../telemetry/tracing.js'

export type ApprovalRow = typeof toolApprovals.$inferSelect

/** A run's approvals, oldest first (the order they were asked in). */
export async function listApprovals(db: Db, orgId: string, runId: string, q: PageInput) {
  const list = keyset(toolApprovals.id, 'asc', q)
  const rows = await db
    .select()
    .from(toolApprovals)
    .where(and(eq(toolApprovals.orgId, orgId), eq(toolApprovals.runId, runId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

export async function insertApproval(
  db: Db,
  orgId: string,
  a: {
    runId: string
    rootRunId: string
    callId: string
    tool: string
    arguments: Record<string, unknown>
    expiresAt: Date
  }
): Promise<ApprovalRow> {
  const [row] = await db
    .insert(toolApprovals)
    // the asking tool call's span: the wait for the decision becomes its child (src/telemetry/genai.ts)
    .values({ id: newId(), orgId, traceparent: currentTraceparent(), ...a })
    .returning()
  return row!
}

/** The approval's status after an undecided one past its time is expired; null when the run has no such approval. */
export async function settledStatus(db: Db, orgId: string, runId: string, id: string): Promise<ApprovalStatus | null> {
  await db
    .update(toolApprovals)
    .set({ status: 'expired', decidedAt: new Date() })
    .where(
      and(
        eq(toolApprovals.id, id),
        eq(toolApprovals.orgId, orgId),
        eq(toolApprovals.status, 'pending'),
        sql`${toolApprovals.expiresAt} <= now()`
      )
    )
  const [row] = await db
    .select({ status: toolApprovals.status })
    .from(toolApprovals)
    .where(and(eq(toolApprovals.id, id), eq(toolApprovals.orgId, orgId), eq(toolApprovals.runId, runId)))
  return row?.status ?? null
}

/** Cancels the run's waiting approvals; how many there were. */
export async function cancelPendingApprovals(db: Db, orgId: string, runId: string): Promise<number> {
  const cancelled = await db
    .update(toolApprovals)
    .set({ status: 'cancelled', decidedAt: new Date() })
    .where(and(eq(toolApprovals.orgId, orgId), eq(toolApprovals.runId, runId), eq(toolApprovals.status, 'pending')))
    .returning({ id: toolApprovals.id })
  return cancelled.length
}

/** Decides a pending, unexpired approval of the run; null when it is not one (missing, decided or past its time). */
export async function decidePending(
  tx: Tx,
  orgId: string,
  runId: string,
  id: string,
  status: ApprovalStatus,
  userId: string | null
): Promise<ApprovalRow | null> {
  const [decided] = await tx
    .update(toolApprovals)
    .set({ status, decidedBy: userId, decidedAt: new Date() })
    .where(
      and(
        eq(toolApprovals.id, id),
        eq(toolApprovals.orgId, orgId),
        eq(toolApprovals.runId, runId),
        eq(toolApprovals.status, 'pending'),
        gt(toolApprovals.expiresAt, sql`now()`)
      )
    )
    .returning()
  return decided ?? null
}

export async function getApproval(tx: Tx, orgId: string, runId: string, id: string): Promise<ApprovalRow | null> {
  const [row] = await tx
    .select()
    .from(toolApprovals)
    .where(and(eq(toolApprovals.id, id), eq(toolApprovals.orgId, orgId), eq(toolApprovals.runId, runId)))
  return row ?? null
}

/** Expires a still pending approval (one past its time that someone tried to decide). */
export async function expireApproval(tx: Tx, orgId: string, id: string): Promise<void> {
  await tx
    .update(toolApprovals)
    .set({ status: 'expired', decidedAt: new Date() })
    .where(and(eq(toolApprovals.id, id), eq(toolApprovals.orgId, orgId), eq(toolApprovals.status, 'pending')))
}

/** A run's approvals a person can still decide (pending and not past their time), oldest first; at most `limit`. */
export async function waitingApprovals(db: Db, orgId: string, runId: string, limit = 100): Promise<ApprovalRow[]> {
  return db
    .select()
    .from(toolApprovals)
    .where(
      and(
        eq(toolApprovals.orgId, orgId),
        eq(toolApprovals.runId, runId),
        eq(toolApprovals.status, 'pending'),
        gt(toolApprovals.expiresAt, sql`now()`)
      )
    )
    .orderBy(toolApprovals.id)
    .limit(limit)
}
