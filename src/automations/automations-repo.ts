import { and, asc, eq, isNotNull, sql } from 'drizzle-orm'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { decodeCursor, invalidCursor, keyset } from '../db/paging.js'
import { dateOrNull, isoOf, isoOrNull } from '../db/rows.js'
import { describeCron, nextRun, nextRuns } from './cron.js'
import { automationFires, automations, type AutomationTarget, type CatchUp } from './tables.js'

export type AutomationRow = typeof automations.$inferSelect

export function automationToWire(a: AutomationRow, now: Date) {
  return {
    id: a.id,
    name: a.name,
    cron: a.cron,
    timezone: a.timezone,
    target: a.target,
    enabled: a.enabled,
    catchUp: a.catchUp,
    description: describeCron(a.cron),
    nextRuns: a.enabled ? nextRuns(a, now, 5).map((d) => d.toISOString()) : [],
    lastFiredAt: isoOrNull(a.lastFiredAt),
    lastRunId: a.lastRunId,
    createdAt: isoOf(a.createdAt),
    updatedAt: isoOf(a.updatedAt),
    createdBy: a.createdBy
  }
}

const targetIds = (target: AutomationTarget) => ({
  skillId: 'skillId' in target ? target.skillId : null,
  playbookId: 'playbookId' in target ? target.playbookId : null
})

/** The tick an enabled schedule waits for, seen from `now`; null while disabled. */
const tickAfter = (a: { cron: string; timezone: string; enabled: boolean }, now: Date) =>
  a.enabled ? nextRun(a, now) : null

export interface AutomationInput {
  name: string
  cron: string
  timezone: string
  target: AutomationTarget
  enabled: boolean
  catchUp: CatchUp
}

export async function createAutomation(
  db: Db,
  orgId: string,
  a: AutomationInput & { createdBy: string | null },
  now: Date
): Promise<AutomationRow> {
  const [row] = await db
    .insert(automations)
    .values({
      id: newId(),
      orgId,
      ...a,
      ...targetIds(a.target),
      nextFireAt: tickAfter(a, now)
    })
    .returning()
  return row!
}

export async function getAutomation(db: Db | Tx, orgId: string, id: string): Promise<AutomationRow | null> {
  const [row] = await db
    .select()
    .from(automations)
    .where(and(eq(automations.orgId, orgId), eq(automations.id, id)))
  return row ?? null
}

/** Automations newest first. */
export async function listAutomations(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const list = keyset(automations.id, 'desc', q)
  const rows = await db
    .select()
    .from(automations)
    .where(and(eq(automations.orgId, orgId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/**
 * Applies a change; the next tick is computed again from `now` when the schedule or the
 * switch changed (a disabled automation has none, so no instance fires it from then on).
 */
export async function updateAutomation(
  db: Db,
  orgId: string,
  current: AutomationRow,
  change: Partial<AutomationInput>,
  now: Date
): Promise<AutomationRow | null> {
  const next = { ...current, ...change }
  const rescheduled = change.cron !== undefined || change.timezone !== undefined || change.enabled !== undefined
  const [row] = await db
    .update(automations)
    .set({
      ...change,
      ...(change.target ? targetIds(change.target) : {}),
      ...(rescheduled ? { nextFireAt: tickAfter(next, now) } : {}),
      updatedAt: sql`now()`
    })
    .where(and(eq(automations.orgId, orgId), eq(automations.id, current.id)))
    .returning()
  return row ?? null
}

export async function deleteAutomation(db: Db, orgId: string, id: string): Promise<boolean> {
  const rows = await db
    .delete(automations)
    .where(and(eq(automations.orgId, orgId), eq(automations.id, id)))
    .returning({ id: automations.id })
  return rows.length === 1
}

export type FireRow = typeof automationFires.$inferSelect

export const fireToWire = (f: FireRow) => ({
  scheduledFor: isoOf(f.scheduledFor),
  firedAt: isoOf(f.firedAt),
  runId: f.runId
})

/** An automation's fires, latest tick first; the cursor is the tick's epoch milliseconds. */
export async function listFires(
  db: Db,
  orgId: string,
  automationId: string,
  q: { limit: number; cursor: string | undefined }
) {
  const list = keyset(automationFires.scheduledFor, 'desc', q, tickOfCursor)
  const rows = await db
    .select()
    .from(automationFires)
    .where(and(eq(automationFires.orgId, orgId), eq(automationFires.automationId, automationId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows, (f) => String(f.scheduledFor.getTime()))
}

function tickOfCursor(cursor: string | undefined): Date | null {
  const key = decodeCursor(cursor, /^[0-9]{1,16}$/)
  const tick = key === null ? null : new Date(Number(key))
  if (tick !== null && Number.isNaN(tick.getTime())) throw invalidCursor()
  return tick
}

/** Enabled automations whose tick has come, locked for this transaction; rows another instance holds are skipped. */
export async function claimDue(tx: Tx, now: Date, limit: number): Promise<AutomationRow[]> {
  return tx
    .select()
    .from(automations)
    .where(and(eq(automations.enabled, true), sql`${automations.nextFireAt} <= ${now.toISOString()}::timestamptz`))
    .orderBy(asc(automations.nextFireAt))
    .limit(limit)
    .for('update', { skipLocked: true })
}

/** The fire rows; answers the automations whose tick was not fired before (the others are left as they were). */
export async function insertFires(
  tx: Tx,
  fires: Array<{ automationId: string; scheduledFor: Date; orgId: string; firedAt: Date; runId: string }>
): Promise<Set<string>> {
  if (fires.length === 0) return new Set()
  // one JSON parameter for the batch (see insertThreadRoots)
  const batch = JSON.stringify(
    fires.map((f) => ({
      a: f.automationId,
      s: f.scheduledFor.toISOString(),
      o: f.orgId,
      f: f.firedAt.toISOString(),
      r: f.runId
    }))
  )
  const rows = rowsOf<{ automation_id: string }>(
    await tx.execute(sql`
    insert into automation_fires (automation_id, scheduled_for, org_id, fired_at, run_id)
    select a, s, o, f, r from jsonb_to_recordset(${batch}::jsonb) as x(a text, s timestamptz, o text, f timestamptz, r text)
    on conflict do nothing
    returning automation_id`)
  )
  return new Set(rows.map((r) => r.automation_id))
}

/** Moves claimed automations to their next tick, with what they fired (one statement for the batch). */
export async function advance(
  tx: Tx,
  moves: Array<{ id: string; next: Date | null; firedAt: Date | null; runId: string | null }>
): Promise<void> {
  if (moves.length === 0) return
  const batch = JSON.stringify(
    moves.map((m) => ({ id: m.id, n: m.next?.toISOString() ?? null, f: m.firedAt?.toISOString() ?? null, r: m.runId }))
  )
  await tx.execute(sql`
    update automations as a set next_fire_at = v.n,
      last_fired_at = coalesce(v.f, a.last_fired_at), last_run_id = coalesce(v.r, a.last_run_id)
    from jsonb_to_recordset(${batch}::jsonb) as v(id text, n timestamptz, f timestamptz, r text)
    where a.id = v.id`)
}

/** The earliest tick any enabled automation waits for (the scheduler sleeps until then). */
export async function earliestTick(db: Db): Promise<Date | null> {
  const [row] = await db
    .select({ at: sql<unknown>`min(${automations.nextFireAt})` })
    .from(automations)
    .where(and(eq(automations.enabled, true), isNotNull(automations.nextFireAt)))
  return dateOrNull(row?.at)
}
