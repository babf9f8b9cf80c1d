import { and, asc, eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { isoOf } from '../db/rows.js'
import { INTEGRATION_KINDS, integrations, type IntegrationKind } from './tables.js'

export type IntegrationRow = typeof integrations.$inferSelect

/** The wire's `{kind, connected, account, connectedAt, lastError}`: every kind, connected or not. */
export function integrationToWire(kind: IntegrationKind, row: IntegrationRow | undefined) {
  return {
    kind,
    connected: row !== undefined,
    account: row?.account ?? null,
    connectedAt: row ? isoOf(row.connectedAt) : null,
    lastError: row?.lastError ?? null
  }
}

export async function listIntegrations(db: Db, orgId: string) {
  const rows = await db.select().from(integrations).where(eq(integrations.orgId, orgId)).orderBy(asc(integrations.kind))
  return INTEGRATION_KINDS.map((kind) =>
    integrationToWire(
      kind,
      rows.find((r) => r.kind === kind)
    )
  )
}

export async function getIntegration(
  db: Db,
  orgId: string,
  kind: IntegrationKind
): Promise<IntegrationRow | undefined> {
  const [row] = await db
    .select()
    .from(integrations)
    .where(and(eq(integrations.orgId, orgId), eq(integrations.kind, kind)))
  return row
}

/** Connects (or reconnects: a new account replaces the old one, and its error is cleared). */
export async function upsertIntegration(
  db: Db,
  orgId: string,
  kind: IntegrationKind,
  v: { account: string; settings: Record<string, unknown>; connectedBy: string | null }
): Promise<IntegrationRow> {
  const [row] = await db
    .insert(integrations)
    .values({ orgId, kind, ...v })
    .onConflictDoUpdate({
      target: [integrations.orgId, integrations.kind],
      set: {
        account: v.account,
        settings: v.settings,
        connectedBy: v.connectedBy,
        connectedAt: sql`now()`,
        updatedAt: sql`now()`,
        lastError: null
      }
    })
    .returning()
  return row!
}

export async function setIntegrationError(
  db: Db,
  orgId: string,
  kind: IntegrationKind,
  lastError: string | null
): Promise<void> {
  await db
    .update(integrations)
    .set({ lastError, updatedAt: sql`now()` })
    .where(and(eq(integrations.orgId, orgId), eq(integrations.kind, kind)))
}

export async function deleteIntegration(db: Db, orgId: string, kind: IntegrationKind): Promise<boolean> {
  const rows = await db
    .delete(integrations)
    .where(and(eq(integrations.orgId, orgId), eq(integrations.kind, kind)))
    .returning({ kind: integrations.kind })
  return rows.length === 1
}
