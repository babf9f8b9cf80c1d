import { and, eq, sql, type SQL } from 'drizzle-orm'
import { builtOnce } from '../db/built-once.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import type { PoolRef } from './backend.js'
import { memoryPools, memorySettings } from './tables.js'
import { boolOf, jsonOf } from '../db/rows.js'

export type PoolScope = 'org' | 'personal'

/** Spec: an invalid scope falls back to `org`. */
export function parseScope(value: unknown): PoolScope {
  return value === 'personal' ? 'personal' : 'org'
}

/** Whether the org has memory on (no settings row: on). The global backend switch is checked by the caller. */
export async function orgMemoryOn(exec: Db | Tx, orgId: string): Promise<boolean> {
  const rows = await exec
    .select({ enabled: memorySettings.enabled })
    .from(memorySettings)
    .where(eq(memorySettings.orgId, orgId))
  return rows[0]?.enabled ?? true
}

/** The org's memory settings (no row: on, no extraction). */
export async function orgMemorySettings(exec: Db | Tx, orgId: string): Promise<{ enabled: boolean; extract: boolean }> {
  const rows = await exec
    .select({ enabled: memorySettings.enabled, extract: memorySettings.extract })
    .from(memorySettings)
    .where(eq(memorySettings.orgId, orgId))
  return { enabled: rows[0]?.enabled ?? true, extract: rows[0]?.extract ?? false }
}

/** Sets the org switch and, when given, extraction (absent: kept as it is). */
export async function setOrgMemory(
  db: Db,
  orgId: string,
  settings: { enabled: boolean; extract?: boolean | undefined },
  updatedBy: string
): Promise<void> {
  const extract = settings.extract === undefined ? {} : { extract: settings.extract }
  await db
    .insert(memorySettings)
    .values({ orgId, enabled: settings.enabled, ...extract, updatedBy })
    .onConflictDoUpdate({
      target: memorySettings.orgId,
      set: { enabled: settings.enabled, ...extract, updatedBy, updatedAt: new Date() }
    })
}

function toRef(row: typeof memoryPools.$inferSelect): PoolRef {
  return { id: row.id, orgId: row.orgId, scope: row.scope, ownerKey: row.ownerKey }
}

/** The existing pool, or null: reads never create one. `ownerKey` is '' for the org pool. */
export async function findPool(
  exec: Db | Tx,
  orgId: string,
  scope: PoolScope,
  ownerKey: string
): Promise<PoolRef | null> {
  const rows = await exec
    .select()
    .from(memoryPools)
    .where(and(eq(memoryPools.orgId, orgId), eq(memoryPools.ownerKey, ownerKey)))
  const row = rows[0]
  return row && row.scope === scope ? toRef(row) : null
}

/** The pool, created on first write; concurrent first writes agree on one (unique key). */
export async function ensurePool(exec: Db | Tx, orgId: string, scope: PoolScope, ownerKey: string): Promise<PoolRef> {
  if (scope === 'personal' && ownerKey === '') throw new Error('a personal pool needs a real user')
  if (scope === 'org' && ownerKey !== '') throw new Error('the org pool has no owner')
  const found = await findPool(exec, orgId, scope, ownerKey)
  if (found) return found
  await exec.insert(memoryPools).values({ id: newId(), orgId, scope, ownerKey }).onConflictDoNothing()
  const created = await findPool(exec, orgId, scope, ownerKey)
  if (!created) throw new Error('memory pool could not be created')
  return created
}

/** The org switch and the pool, in one round trip (every Memory Hub request starts here). */
export async function lookupPool(
  db: Db,
  orgId: string,
  scope: PoolScope,
  ownerKey: string
): Promise<{ orgOn: boolean; pool: PoolRef | null }> {
  const result = await db.execute(sql`
    select coalesce((select enabled from memory_settings where org_id = ${orgId}), true) as org_on,
           p.id, p.scope, p.owner_key
    from (select 1) as one
    left join memory_pools p on p.org_id = ${orgId} and p.owner_key = ${ownerKey}`)
  const row = rowsOf<{
    org_on: boolean | string
    id: string | null
    scope: PoolScope | null
    owner_key: string | null
  }>(result)[0]
  const orgOn = boolOf(row?.org_on)
  const pool = row?.id && row.scope === scope ? { id: row.id, orgId, scope, ownerKey: row.owner_key ?? '' } : null
  return { orgOn, pool }
}

/** A recall's frame the lookup records itself when there is nothing to search for it. */
export interface UnsearchedFrame {
  id: string
  scope: PoolScope
  ownerKey: string
  query: string
  mode: string
}

interface LookupValues {
  orgId: string
  runId: string
  rootRunId: string
  /** the unsearched frames, as JSON */
  keys: string
}

/** recallLookup's statement; `enabled`: whether memory is on, read or given. */
function lookupStatement(v: { [K in keyof LookupValues]: unknown }, enabled: SQL): SQL {
  return sql`
    with ms as (select enabled, extract from memory_settings where org_id = ${v.orgId}),
    s as (select ${enabled} as enabled, coalesce((select extract from ms), false) as extract),
    f as (select * from jsonb_to_recordset(${v.keys}::jsonb) as f(id text, scope text, owner_key text, query text, mode text)),
    p as (select mp.id, mp.scope, mp.owner_key from memory_pools mp join f on mp.owner_key = f.owner_key and mp.scope = f.scope
          where mp.org_id = ${v.orgId}),
    led as (
      insert into memory_recalls (id, org_id, run_id, root_run_id, scope, query, item_ids, latency_ms, mode)
      select f.id, ${v.orgId}, ${v.runId}, ${v.rootRunId}, f.scope, f.query, '[]'::jsonb,
             greatest(0, round(extract(epoch from clock_timestamp() - statement_timestamp()) * 1000))::int, f.mode
      from f, s where s.enabled and (f.query = '' or not exists (select 1 from p where p.owner_key = f.owner_key))
      returning id)
    select s.enabled, s.extract,
           (select coalesce(json_agg(json_build_object('id', p.id, 'scope', p.scope, 'ownerKey', p.owner_key)), '[]'::json) from p) as pools,
           (select coalesce(json_agg(led.id), '[]'::json) from led) as recorded
    from s`
}

// built by drizzle once each (every run's recall sends one), with the values filled in per run
const LOOKUP_NAMES = ['orgId', 'runId', 'rootRunId', 'keys'] as const
const lookupReadingSettings = builtOnce<LookupValues>(LOOKUP_NAMES, (v) =>
  lookupStatement(v, sql`coalesce((select enabled from ms), true)`)
)
const lookupGivenSettings = builtOnce<LookupValues & { enabled: boolean }>([...LOOKUP_NAMES, 'enabled'], (v) =>
  lookupStatement(v, sql`${v.enabled}::boolean`)
)

/**
 * What a run's recall needs before it searches, in ONE statement: the org's settings (unless
 * the caller already read them: `knownEnabled`), the pools of the scopes it reads, and the
 * ledger frames of the scopes with nothing to search (no pool yet, or an empty query),
 * recorded by the same statement when memory is on (their latency is the statement's own
 * time). A run of an org whose memory holds nothing yet costs one round trip for its recall.
 */
export async function recallLookup(
  db: Db,
  run: { id: string; orgId: string; rootRunId: string },
  frames: UnsearchedFrame[],
  knownEnabled: boolean | undefined
): Promise<{ enabled: boolean; extract: boolean; pools: Map<string, PoolRef>; recorded: Set<string> }> {
  const values = {
    orgId: run.orgId,
    runId: run.id,
    rootRunId: run.rootRunId,
    keys: JSON.stringify(
      frames.map((f) => ({ id: f.id, scope: f.scope, owner_key: f.ownerKey, query: f.query, mode: f.mode }))
    )
  }
  const rows = rowsOf<{ enabled: unknown; extract: unknown; pools: unknown; recorded: unknown }>(
    knownEnabled === undefined
      ? await lookupReadingSettings(db, values)
      : await lookupGivenSettings(db, { ...values, enabled: knownEnabled })
  )
  const row = rows[0]!
  const pools = new Map<string, PoolRef>()
  for (const p of jsonOf<Array<{ id: string; scope: PoolScope; ownerKey: string }>>(row.pools))
    pools.set(p.ownerKey, { id: p.id, orgId: run.orgId, scope: p.scope, ownerKey: p.ownerKey })
  return {
    enabled: boolOf(row.enabled),
    extract: boolOf(row.enabled) && boolOf(row.extract),
    pools,
    recorded: new Set(jsonOf<string[]>(row.recorded))
  }
}
