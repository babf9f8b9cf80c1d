import { and, asc, eq, sql } from 'drizzle-orm'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { keyset } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { modelDefaults, providers } from './tables.js'

export type ProviderRow = typeof providers.$inferSelect

/** An org's model provider; the API key is a secret and never part of it. */
export function providerToWire(p: ProviderRow) {
  return {
    id: p.id,
    name: p.name,
    kind: p.kind,
    baseUrl: p.baseUrl,
    models: p.models,
    ready: p.ready,
    lastCheckedAt: isoOrNull(p.lastCheckedAt),
    lastError: p.lastError,
    createdAt: isoOf(p.createdAt),
    updatedAt: isoOf(p.updatedAt),
    createdBy: p.createdBy
  }
}

/** The secret name of a provider's API key (stored as `cairn:provider:<id>:api_key`). */
export const apiKeySecretName = (providerId: string) => `provider:${providerId}:api_key`

/** Inserts a provider; null when the org already has one of that name. */
export async function insertProvider(
  db: Db,
  orgId: string,
  p: {
    id: string
    name: string
    kind: ProviderRow['kind']
    baseUrl: string
    models: string[]
    modelsGiven: boolean
    createdBy: string | null
  }
): Promise<ProviderRow | null> {
  const [row] = await db
    .insert(providers)
    .values({ ...p, orgId })
    .onConflictDoNothing({ target: [providers.orgId, providers.name] })
    .returning()
  return row ?? null
}

export async function getProvider(db: Db, orgId: string, id: string): Promise<ProviderRow | null> {
  const [row] = await db
    .select()
    .from(providers)
    .where(and(eq(providers.orgId, orgId), eq(providers.id, id)))
  return row ?? null
}

export async function providerNamed(db: Db, orgId: string, name: string): Promise<ProviderRow | null> {
  const [row] = await db
    .select()
    .from(providers)
    .where(and(eq(providers.orgId, orgId), eq(providers.name, name)))
  return row ?? null
}

/** Providers oldest first: the order in which they offer a model id two of them share. */
export async function listProviders(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const list = keyset(providers.id, 'asc', q)
  const rows = await db
    .select()
    .from(providers)
    .where(and(eq(providers.orgId, orgId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/** The org's ready providers, oldest first (GET /api/models). */
export async function readyProviders(db: Db, orgId: string): Promise<ProviderRow[]> {
  return db
    .select()
    .from(providers)
    .where(and(eq(providers.orgId, orgId), eq(providers.ready, true)))
    .orderBy(asc(providers.id))
}

/**
 * The oldest provider of the org configured with this model (a run naming it), whether its
 * last check reached it or not: a model that is down fails its runs, saying why.
 */
export async function providerOffering(db: Db | Tx, orgId: string, model: string): Promise<ProviderRow | null> {
  const [row] = await db
    .select()
    .from(providers)
    .where(and(eq(providers.orgId, orgId), sql`${providers.models} @> ${JSON.stringify([model])}::jsonb`))
    .orderBy(asc(providers.id))
    .limit(1)
  return row ?? null
}

/** Records a check's outcome: ready with (when it lists them) the models, or not ready and why. */
export async function recordCheck(
  db: Db,
  orgId: string,
  id: string,
  outcome: { ok: true; models: string[] | null } | { ok: false; error: string }
): Promise<ProviderRow | null> {
  const [row] = await db
    .update(providers)
    .set(
      outcome.ok
        ? {
            ready: true,
            lastError: null,
            lastCheckedAt: sql`now()`,
            updatedAt: sql`now()`,
            ...(outcome.models ? { models: outcome.models } : {})
          }
        : { ready: false, lastError: outcome.error, lastCheckedAt: sql`now()`, updatedAt: sql`now()` }
    )
    .where(and(eq(providers.orgId, orgId), eq(providers.id, id)))
    .returning()
  return row ?? null
}

export async function deleteProvider(db: Db, orgId: string, id: string): Promise<boolean> {
  const rows = await db
    .delete(providers)
    .where(and(eq(providers.orgId, orgId), eq(providers.id, id)))
    .returning({ id: providers.id })
  return rows.length === 1
}

/**
 * What the org's default model is made of, in one query: the model its admin chose (null:
 * none), the first model of its oldest provider with models, ready at its last check or not
 * (null: none), and the kind of its oldest provider (null: it has none). Configuration, not
 * reachability: a provider that is down is still the one its runs must fail on.
 */
export async function modelDefaultsOf(
  db: Db | Tx,
  orgId: string
): Promise<{ chosen: string | null; firstProviderModel: string | null; providerKind: ProviderRow['kind'] | null }> {
  const rows = rowsOf<{ chosen: string | null; first: string | null; kind: ProviderRow['kind'] | null }>(
    await db.execute(sql`
    select (select model from model_defaults where org_id = ${orgId}) as chosen,
           (select models->>0 from providers where org_id = ${orgId} and jsonb_array_length(models) > 0 order by id limit 1) as first,
           (select kind from providers where org_id = ${orgId} order by id limit 1) as kind`)
  )
  return {
    chosen: rows[0]?.chosen ?? null,
    firstProviderModel: rows[0]?.first ?? null,
    providerKind: rows[0]?.kind ?? null
  }
}

/** Chooses (or, with null, forgets) the org's default model. */
export async function setModelDefault(
  db: Db,
  orgId: string,
  model: string | null,
  userId: string | null
): Promise<void> {
  if (model === null) {
    await db.delete(modelDefaults).where(eq(modelDefaults.orgId, orgId))
    return
  }
  await db
    .insert(modelDefaults)
    .values({ orgId, model, updatedBy: userId })
    .onConflictDoUpdate({ target: modelDefaults.orgId, set: { model, updatedBy: userId, updatedAt: sql`now()` } })
}
