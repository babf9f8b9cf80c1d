import { and, asc, eq, getTableColumns, inArray, notLike, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { keyset } from '../db/paging.js'
import { boolOf, isoOf, isoOrNull } from '../db/rows.js'
import { secrets } from './tables.js'

export type SecretRow = typeof secrets.$inferSelect

export function secretToWire(s: SecretRow) {
  return {
    name: s.name,
    createdAt: isoOf(s.createdAt),
    updatedAt: isoOf(s.updatedAt),
    updatedBy: s.updatedBy,
    lastUsedAt: isoOrNull(s.lastUsedAt)
  }
}

/** Sets a secret; `created` tells a new name (201) from a replaced value (200). */
export async function putSecret(
  db: Db,
  orgId: string,
  s: { name: string; keyId: string; sealed: string; updatedBy: string | null }
): Promise<{ row: SecretRow; created: boolean }> {
  const [row] = await db
    .insert(secrets)
    .values({ orgId, ...s })
    .onConflictDoUpdate({
      target: [secrets.orgId, secrets.name],
      set: { keyId: s.keyId, sealed: s.sealed, updatedBy: s.updatedBy, updatedAt: sql`now()` }
    })
    // xmax is 0 on a row this statement inserted, the updating transaction's id otherwise
    .returning({ ...getTableColumns(secrets), created: sql<boolean>`(xmax = 0)` })
  const { created, ...secret } = row!
  return { row: secret, created: boolOf(created) }
}

/** Secrets by name (the order names sort in, byte order). */
export async function listSecrets(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const list = keyset(secrets.name, 'asc', q)
  const rows = await db
    .select()
    .from(secrets)
    // internal names (`cairn:…`, the platform's credentials) are not the org's to list
    .where(and(eq(secrets.orgId, orgId), notLike(secrets.name, 'cairn:%'), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows, (s) => s.name)
}

export async function deleteSecret(db: Db, orgId: string, name: string): Promise<boolean> {
  const rows = await db
    .delete(secrets)
    .where(and(eq(secrets.orgId, orgId), eq(secrets.name, name)))
    .returning({ name: secrets.name })
  return rows.length === 1
}

export async function getSecret(db: Db, orgId: string, name: string): Promise<SecretRow | undefined> {
  const [row] = await db
    .select()
    .from(secrets)
    .where(and(eq(secrets.orgId, orgId), eq(secrets.name, name)))
  return row
}

export async function deleteSecrets(db: Db, orgId: string, names: string[]): Promise<number> {
  if (names.length === 0) return 0
  const rows = await db
    .delete(secrets)
    .where(and(eq(secrets.orgId, orgId), inArray(secrets.name, names)))
    .returning({ name: secrets.name })
  return rows.length
}

/**
 * What the start-up key check needs: up to `limit` rows sealed under these keys, and
 * whether any row is stored at all.
 */
export async function keyCheckSample(
  db: Db,
  keyIds: string[],
  limit: number
): Promise<{ rows: SecretRow[]; any: boolean }> {
  const rows =
    keyIds.length === 0 ? [] : await db.select().from(secrets).where(inArray(secrets.keyId, keyIds)).limit(limit)
  if (rows.length > 0) return { rows, any: true }
  const [one] = await db.select({ name: secrets.name }).from(secrets).limit(1)
  return { rows, any: one !== undefined }
}

/** The sealed rows of these names, marking them used. */
export async function useSecrets(db: Db, orgId: string, names: string[]): Promise<SecretRow[]> {
  if (names.length === 0) return []
  return db
    .update(secrets)
    .set({ lastUsedAt: sql`now()` })
    .where(and(eq(secrets.orgId, orgId), inArray(secrets.name, names)))
    .returning()
}

/**
 * Seals rows of other keys again under the current one, a batch per transaction; rows
 * being re-sealed by another instance are skipped (`SKIP LOCKED`), so instances share
 * the work. Only rows under the ring's previous keys are read (rows under a key this
 * instance lacks stay for one that has it); `reseal` answers null for a row its key does
 * not open (altered): it stays as it is.
 * Returns how many rows it moved and how many no key opens.
 */
export async function resealBatch(
  db: Db,
  previousKeyIds: string[],
  batch: number,
  reseal: (row: SecretRow) => { keyId: string; sealed: string } | null
): Promise<{ moved: number; unopened: number; seen: number }> {
  if (previousKeyIds.length === 0) return { moved: 0, unopened: 0, seen: 0 }
  return db.transaction(async (tx) => {
    const rows = await tx
      .select()
      .from(secrets)
      .where(inArray(secrets.keyId, previousKeyIds))
      .orderBy(asc(secrets.orgId), asc(secrets.name))
      .limit(batch)
      .for('update', { skipLocked: true })
    let moved = 0
    let unopened = 0
    for (const row of rows) {
      const next = reseal(row)
      if (!next) {
        unopened++
        continue
      }
      // updated_at stays: the value did not change
      await tx
        .update(secrets)
        .set(next)
        .where(and(eq(secrets.orgId, row.orgId), eq(secrets.name, row.name)))
      moved++
    }
    return { moved, unopened, seen: rows.length }
  })
}
