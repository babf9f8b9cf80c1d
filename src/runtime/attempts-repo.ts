import { and, eq, sql } from 'drizzle-orm'
import { rowsOf, type Db } from '../db/client.js'
import { toolCallAttempts } from './tables.js'

/** Which tool call of which run: the model round that asked for it and its id. */
export interface AttemptKey {
  orgId: string
  runId: string
  round: number
  callId: string
}

/**
 * What a call's start found: `started` (this attempt is the one that runs), `ended` (an
 * earlier attempt with the same decision ended: its answer), or `interrupted` (an earlier
 * attempt with the same decision started and never ended).
 */
export type AttemptStart =
  { kind: 'started' } | { kind: 'ended'; status: string; content: string } | { kind: 'interrupted' }

/**
 * Records that a call starts, unless an attempt with the same decision (`approvalId`, null for
 * a call that needs none) was recorded before: a new decision starts the call over, the same
 * one never does. One statement decides, so two instances cannot both start it.
 */
export async function startAttempt(db: Db, key: AttemptKey, approvalId: string | null): Promise<AttemptStart> {
  const [fresh] = await db
    .insert(toolCallAttempts)
    .values({ ...key, approvalId })
    .onConflictDoUpdate({
      target: [toolCallAttempts.runId, toolCallAttempts.round, toolCallAttempts.callId],
      set: { approvalId, startedAt: sql`now()`, endedAt: null, status: null, content: null },
      setWhere: sql`${toolCallAttempts.approvalId} is distinct from ${approvalId}`
    })
    .returning({ runId: toolCallAttempts.runId })
  if (fresh) return { kind: 'started' }
  const [earlier] = await db
    .select({ endedAt: toolCallAttempts.endedAt, status: toolCallAttempts.status, content: toolCallAttempts.content })
    .from(toolCallAttempts)
    .where(attemptOf(key))
  if (earlier?.endedAt && earlier.status !== null && earlier.content !== null)
    return { kind: 'ended', status: earlier.status, content: earlier.content }
  return { kind: 'interrupted' }
}

/** Records a call's end: its status and what its model was given. */
export async function endAttempt(db: Db, key: AttemptKey, status: string, content: string): Promise<void> {
  await db
    .update(toolCallAttempts)
    .set({ endedAt: sql`now()`, status, content })
    .where(attemptOf(key))
}

const attemptOf = (key: AttemptKey) =>
  and(
    eq(toolCallAttempts.runId, key.runId),
    eq(toolCallAttempts.round, key.round),
    eq(toolCallAttempts.callId, key.callId),
    eq(toolCallAttempts.orgId, key.orgId)
  )

/**
 * Deletes the attempts of calls started before `before` whose run is over (or gone): once a
 * run ended nothing starts its calls again, so they are kept only as long as its events. A
 * run still queued, running or waiting keeps its attempts, whatever their age: resuming it
 * must not run a call twice.
 */
export async function pruneAttempts(db: Db, before: Date): Promise<number> {
  const result = await db.execute(sql`
    with gone as (
      delete from ${toolCallAttempts} a
      where a.started_at < ${before.toISOString()}::timestamptz
        and not exists (
          select 1 from runs r
          where r.id = a.run_id and r.status in ('queued', 'running', 'requires_action'))
      returning 1)
    select count(*)::int as n from gone`)
  return rowsOf<{ n: number }>(result)[0]?.n ?? 0
}
