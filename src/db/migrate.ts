import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator'
import type { PgliteDatabase } from 'drizzle-orm/pglite'
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

/**
 * Applies pending migrations. On real Postgres the work happens on one dedicated
 * connection holding a session advisory lock, so concurrent boots run them once.
 */
export async function migrateDatabase(database: Database, url?: string): Promise<void> {
  const folder = migrationsFolder()
  if (database.kind === 'pglite') {
    await migratePglite(database.db as unknown as PgliteDatabase<Record<string, never>>, { migrationsFolder: folder })
    return
  }
  if (!url) throw new Error('migrating real Postgres needs its url')
  const conn = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 10 })
  try {
    await conn`select pg_advisory_lock(${MIGRATION_LOCK})`
    await migratePostgres(drizzlePostgres({ client: conn }), { migrationsFolder: folder })
  } finally {
    await conn`select pg_advisory_unlock(${MIGRATION_LOCK})`.catch(() => {})
    await conn.end({ timeout: 5 })
  }
}
