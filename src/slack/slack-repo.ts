import { and, eq, lt, ne, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { integrations } from '../integrations/tables.js'
import { slackEvents, slackMessages, slackTeams, slackThreads } from './tables.js'

export type SlackTeamRow = typeof slackTeams.$inferSelect

export async function teamById(db: Db, teamId: string): Promise<SlackTeamRow | undefined> {
  const [row] = await db.select().from(slackTeams).where(eq(slackTeams.teamId, teamId))
  return row
}

/** Every connected team, for a request that names none (url_verification): at most `limit`. */
export async function connectedTeams(db: Db, limit: number): Promise<SlackTeamRow[]> {
  return db.select().from(slackTeams).orderBy(slackTeams.connectedAt).limit(limit)
}

/**
 * Points the team at the org (and the org at the team only): false when another org has
 * the team, and then nothing changed.
 */
export async function claimTeam(
  tx: Tx,
  orgId: string,
  team: { teamId: string; botUserId: string | null; botId: string | null }
): Promise<boolean> {
  const [other] = await tx
    .select({ orgId: slackTeams.orgId })
    .from(slackTeams)
    .where(and(eq(slackTeams.teamId, team.teamId), ne(slackTeams.orgId, orgId)))
    .for('update')
  if (other) return false
  await tx.delete(slackTeams).where(and(eq(slackTeams.orgId, orgId), ne(slackTeams.teamId, team.teamId)))
  const rows = await tx
    .insert(slackTeams)
    .values({ orgId, ...team })
    .onConflictDoUpdate({
      target: slackTeams.teamId,
      set: { botUserId: team.botUserId, botId: team.botId, connectedAt: sql`now()` },
      setWhere: eq(slackTeams.orgId, orgId)
    })
    .returning({ teamId: slackTeams.teamId })
  return rows.length === 1
}

/** Removes the org's Slack connection rows (its team and its integrations row); true when it had one. */
export async function dropConnection(tx: Tx, orgId: string): Promise<boolean> {
  const teams = await tx.delete(slackTeams).where(eq(slackTeams.orgId, orgId)).returning({ teamId: slackTeams.teamId })
  const rows = await tx
    .delete(integrations)
    .where(and(eq(integrations.orgId, orgId), eq(integrations.kind, 'slack')))
    .returning({ orgId: integrations.orgId })
  return teams.length + rows.length > 0
}

/** Whether the team is still connected to the org (a disconnect since the request was verified starts nothing). */
export async function stillConnected(tx: Tx, team: { teamId: string; orgId: string }): Promise<boolean> {
  const rows = await tx
    .select({ teamId: slackTeams.teamId })
    .from(slackTeams)
    .where(and(eq(slackTeams.teamId, team.teamId), eq(slackTeams.orgId, team.orgId)))
    .for('share')
  return rows.length === 1
}

/** Records an event id; false when it was taken before (a retry, or a duplicate delivery). */
export async function firstDelivery(tx: Tx, orgId: string, teamId: string, eventId: string): Promise<boolean> {
  const rows = await tx
    .insert(slackEvents)
    .values({ orgId, teamId, eventId })
    .onConflictDoNothing()
    .returning({ eventId: slackEvents.eventId })
  return rows.length === 1
}

/** Claims one Slack message for a run; false when another event of the same message has it. */
export async function claimMessage(
  tx: Tx,
  m: { orgId: string; teamId: string; channel: string; ts: string; runId: string; eventId: string }
): Promise<boolean> {
  const rows = await tx.insert(slackMessages).values(m).onConflictDoNothing().returning({ ts: slackMessages.ts })
  return rows.length === 1
}

/**
 * The Cairn thread of a Slack thread: `{rootRunId: null}` when this run starts it (the
 * mapping now points at `runId`), else the root of the thread it continues.
 */
export async function threadFor(
  tx: Tx,
  t: { orgId: string; teamId: string; channel: string; threadTs: string; runId: string }
): Promise<{ rootRunId: string | null }> {
  const inserted = await tx
    .insert(slackThreads)
    .values({ orgId: t.orgId, teamId: t.teamId, channel: t.channel, threadTs: t.threadTs, rootRunId: t.runId })
    .onConflictDoNothing()
    .returning({ rootRunId: slackThreads.rootRunId })
  if (inserted.length === 1) return { rootRunId: null }
  const [row] = await tx
    .select()
    .from(slackThreads)
    .where(
      and(eq(slackThreads.teamId, t.teamId), eq(slackThreads.channel, t.channel), eq(slackThreads.threadTs, t.threadTs))
    )
  // the team moved to another org since: the thread starts again there
  if (!row || row.orgId !== t.orgId) {
    await restartThread(tx, t)
    return { rootRunId: null }
  }
  return { rootRunId: row.rootRunId }
}

/** Points a Slack thread at a new Cairn thread rooted at `runId` (its old root is gone or in another org). */
export async function restartThread(
  tx: Tx,
  t: { orgId: string; teamId: string; channel: string; threadTs: string; runId: string }
): Promise<void> {
  await tx
    .update(slackThreads)
    .set({ orgId: t.orgId, rootRunId: t.runId, createdAt: sql`now()` })
    .where(
      and(eq(slackThreads.teamId, t.teamId), eq(slackThreads.channel, t.channel), eq(slackThreads.threadTs, t.threadTs))
    )
}

/** Deletes dedupe rows older than `hours` (Slack retries an event for about an hour). */
export async function pruneDedupe(db: Db, hours: number): Promise<number> {
  const cutoff = sql`now() - make_interval(hours => ${hours})`
  const events = await db
    .delete(slackEvents)
    .where(lt(slackEvents.receivedAt, cutoff))
    .returning({ id: slackEvents.eventId })
  const messages = await db
    .delete(slackMessages)
    .where(lt(slackMessages.createdAt, cutoff))
    .returning({ ts: slackMessages.ts })
  return events.length + messages.length
}
