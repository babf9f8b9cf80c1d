import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { drizzle as drizzlePostgres, type PostgresJsDatabase } from 'drizzle-orm/postgres-js'
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator'
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import type { Database } from './client.js'

/** Any constant shared by every Cairn instance; two instances booting at once take turns. */
const MIGRATION_LOCK = 0x636169726e // "cairn"

/** drizzle/ sits at the package root, above src/ when run from source and dist/src/ when built. */
export function migrationsFolder(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'drizzle', 'meta', '_journal.json'))) return join(dir, 'drizzle')
    dir = dirname(dir)
  }
  throw new Error('drizzle/ migrations folder not found')
}

export interface MigrationReport {
  /** migrations this call applied */
  applied: number
  /** migrations the schema has now */
  total: number
}

/** Rows of drizzle's own bookkeeping table (0 before the first migration). */
const APPLIED = sql`select count(*)::int as n from drizzle.__drizzle_migrations`
const HAS_TABLE = sql`select to_regclass('drizzle.__drizzle_migrations') is not null as present`

/**
 * Applies pending migrations. On real Postgres the work happens on one dedicated
 * connection holding a session advisory lock, so concurrent boots run them once.
 */
export async function migrateDatabase(database: Database, url?: string): Promise<MigrationReport> {
  const folder = migrationsFolder()
  const total = (JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: unknown[] })
    .entries.length
  const apply = async (db: PostgresJsDatabase) => {
    const count = async () =>
      (await db.execute<{ present: boolean }>(HAS_TABLE))[0]?.present
        ? (await db.execute<{ n: number }>(APPLIED))[0]!.n
        : 0
    const before = await count()
    await migratePostgres(db, { migrationsFolder: folder })
    return { applied: (await count()) - before, total }
  }
  // the embedded database has one process (its directory is locked) and one connection
  if (database.kind === 'pglite') return apply(database.db as unknown as PostgresJsDatabase)
  if (!url) throw new Error('migrating real Postgres needs its url')
  const conn = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 10 })
  try {
    await conn`select pg_advisory_lock(${MIGRATION_LOCK})`
    return await apply(drizzlePostgres({ client: conn }))
  } finally {
    await conn`select pg_advisory_unlock(${MIGRATION_LOCK})`.catch(() => {})
    await conn.end({ timeout: 5 })
  }
}
