import { and, desc, eq, isNull, lt, or, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import { apiKeys } from './tables.js'
import { generateApiKey, hashSecret } from './tokens.js'

export interface MintedKey {
  id: string
  name: string
  key: string
  last4: string
  createdAt: Date
}

/** Mints a key for an org. The plaintext is returned here once and never stored. */
export async function mintKey(db: Db, orgId: string, createdBy: string | null, name: string): Promise<MintedKey> {
  const key = generateApiKey()
  const row = { id: newId(), orgId, name, keyHash: hashSecret(key), last4: key.slice(-4), createdBy }
  const [inserted] = await db.insert(apiKeys).values(row).returning({ createdAt: apiKeys.createdAt })
  return { id: row.id, name, key, last4: row.last4, createdAt: inserted!.createdAt }
}

export async function listKeys(db: Db, orgId: string) {
  return db
    .select({
      id: apiKeys.id,
      name: apiKeys.name,
      last4: apiKeys.last4,
      createdAt: apiKeys.createdAt,
      lastUsedAt: apiKeys.lastUsedAt,
      revokedAt: apiKeys.revokedAt,
      createdBy: apiKeys.createdBy
    })
    .from(apiKeys)
    .where(eq(apiKeys.orgId, orgId))
    .orderBy(desc(apiKeys.createdAt), desc(apiKeys.id))
}

/** Revokes (never deletes) a key of the org; false when the org has no such key. Revoking twice is fine. */
export async function revokeKey(db: Db, orgId: string, id: string): Promise<boolean> {
  const found = await db
    .select({ id: apiKeys.id })
    .from(apiKeys)
    .where(and(eq(apiKeys.orgId, orgId), eq(apiKeys.id, id)))
  if (found.length === 0) return false
  await db
    .update(apiKeys)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(apiKeys.orgId, orgId), eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
  return true
}

export interface KeyRecord {
  id: string
  orgId: string
  keyHash: string
  lastUsedAt: Date | null
}

/** The live (unrevoked) key with this hash. */
export async function findLiveKey(db: Db, keyHash: string): Promise<KeyRecord | null> {
  const rows = await db
    .select({ id: apiKeys.id, orgId: apiKeys.orgId, keyHash: apiKeys.keyHash, lastUsedAt: apiKeys.lastUsedAt })
    .from(apiKeys)
    .where(and(eq(apiKeys.keyHash, keyHash), isNull(apiKeys.revokedAt)))
  return rows[0] ?? null
}

export const LAST_USED_GRANULARITY_MS = 60_000

/** Records use, at most once a minute per key, whichever instance served it. */
export async function touchKey(db: Db, id: string): Promise<void> {
  await db
    .update(apiKeys)
    .set({ lastUsedAt: sql`now()` })
    .where(
      and(eq(apiKeys.id, id), or(isNull(apiKeys.lastUsedAt), lt(apiKeys.lastUsedAt, sql`now() - interval '1 minute'`)))
    )
}
