import { sql, type SQL } from 'drizzle-orm'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import type { EmbeddingKind } from './tables.js'

/**
 * The vector side of search, in SQL of its own: the `vector` column of `embeddings` exists only
 * where the database has pgvector (always on the embedded database; on PostgreSQL where the
 * server has the extension), so drizzle's schema does not know it.
 */

export interface VectorSupport {
  available: boolean
  /** why not, for the start log and `GET /api/config` readers */
  reason: string | null
}

/** Whether this database can store and search vectors, and if not, why. */
export async function vectorSupport(db: Db): Promise<VectorSupport> {
  const [row] = rowsOf<{ installed: boolean; column: boolean; offered: boolean }>(
    await db.execute(sql`
    select exists (select 1 from pg_extension where extname = 'vector') as installed,
           exists (select 1 from information_schema.columns
                   where table_schema = current_schema() and table_name = 'embeddings' and column_name = 'vector') as "column",
           exists (select 1 from pg_available_extensions where name = 'vector') as offered`)
  )
  if (row?.installed && row.column) return { available: true, reason: null }
  if (row?.installed)
    return {
      available: false,
      reason: 'the embeddings table has no vector column (the migration ran before pgvector was installed)'
    }
  if (row?.offered)
    return {
      available: false,
      reason:
        'the PostgreSQL server offers pgvector but this database has not created it (CREATE EXTENSION vector needs a superuser); create it and restart'
    }
  return {
    available: false,
    reason:
      'the PostgreSQL server has no pgvector extension (use an image with it, such as pgvector/pgvector:pg15, or install it), so search matches words only'
  }
}

/** pgvector's text form of a vector. */
export const vectorLiteral = (v: readonly number[]) => `[${v.join(',')}]`

export interface VectorHit {
  kind: EmbeddingKind
  id: string
  /** cosine similarity, 1 for the same direction */
  similarity: number
}

/**
 * The nearest vectors of the current model within one pool (or an org's knowledge), by cosine
 * distance, closest first, at least `minSimilarity` alike. Org, pool, kind and model are in the
 * same statement as the distance, so no other tenant's vector is ever compared. An exact scan:
 * the pool's vectors are read from `embeddings_pool_vectors_idx` alone (up to 512 dimensions;
 * larger ones through `embeddings_pool_idx` and their rows) and each distance computed (a few
 * milliseconds for 10,000 vectors; see docs/deployment.md).
 */
export async function nearest(
  db: Db | Tx,
  where: {
    orgId: string
    poolId: string
    kinds: readonly EmbeddingKind[]
    modelKey: string
    dimensions: number
    /** narrows the rows further (a tag, the phrases and exclusions of a query), on `item_id` */
    extra?: SQL | undefined
  },
  query: readonly number[],
  limit: number,
  minSimilarity: number
): Promise<VectorHit[]> {
  const rows = rowsOf<{ kind: EmbeddingKind; id: string; distance: number }>(
    await db.execute(nearestSql({ ...where, poolId: sql`${where.poolId}` }, query, limit, minSimilarity))
  )
  return rows.map((r) => ({
    kind: r.kind,
    id: r.id,
    similarity: Math.round((1 - Number(r.distance)) * 10_000) / 10_000
  }))
}

/**
 * nearest()'s query (kind, id, distance; closest first), as a statement or a CTE's body of
 * one; `poolId` may be an expression (a pool looked up by the same statement).
 */
export function nearestSql(
  where: {
    orgId: string
    poolId: SQL
    kinds: readonly EmbeddingKind[]
    modelKey: string
    dimensions: number
    extra?: SQL | undefined
  },
  query: readonly number[],
  limit: number,
  minSimilarity: number
): SQL {
  const kinds = sql.join(
    where.kinds.map((k) => sql`${k}`),
    sql`, `
  )
  // the size as a literal, not a parameter: a plan made for any size could not use the
  // index of vectors up to 512 dimensions (embeddings_pool_vectors_idx), one made for this size can
  const dimensions = sql.raw(String(Math.trunc(where.dimensions)))
  const q = vectorLiteral(query)
  const maxDistance = 1 - minSimilarity
  const distance = sql`(vector <=> ${q}::vector)`
  return sql`
    select kind, id, distance from (
      select kind, item_id as id, ${distance}::float8 as distance
      from embeddings
      where org_id = ${where.orgId} and pool_id = ${where.poolId} and kind in (${kinds})
        and state = 'ready' and model = ${where.modelKey} and dimensions = ${dimensions}
        ${where.extra ?? sql``}
      order by ${distance}
      limit ${limit}) nearest
    -- a zero vector's distance is NaN, which this comparison never passes
    where distance <= ${maxDistance}
    order by distance, id`
}
