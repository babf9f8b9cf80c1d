import { randomBytes } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import postgres from 'postgres'
import { buildApp } from '../src/app.js'
import { loadConfig, type Config, type Env } from '../src/config.js'
import { openDatabase, type Database } from '../src/db/client.js'
import { migrateDatabase } from '../src/db/migrate.js'
import type { RuntimeWiring } from '../src/runtime/service.js'

/** The bits of a tap Test the helpers need (teardown). */
export interface Teardown {
  teardown(fn: () => unknown): void
}

export type EnvOverrides = Partial<Record<keyof Env, string>>

/** A config for tests: quiet logs, test mode, plus overrides. */
export function testConfig(overrides: EnvOverrides = {}): Config {
  return loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', ...overrides })
}

export interface TestDatabase {
  database: Database
  /** the real Postgres url of this test's own database, when running against Postgres */
  url: string | undefined
}

/**
 * A fresh, migrated database for one test file: an in-memory PGlite by default, or a
 * new database on the server named by DATABASE_URL (dropped at teardown). Test files
 * run in parallel without sharing rows.
 */
export async function createTestDatabase(t: Teardown): Promise<TestDatabase> {
  const serverUrl = process.env.DATABASE_URL
  if (!serverUrl) {
    const database = await openDatabase({ dataDir: 'memory://' })
    await migrateDatabase(database)
    t.teardown(() => database.close())
    return { database, url: undefined }
  }
  const name = `cairn_test_${process.pid}_${randomBytes(4).toString('hex')}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  const database = await openDatabase({ url: url.toString(), poolMax: 10 })
  await migrateDatabase(database, url.toString())
  t.teardown(async () => {
    await database.close()
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end()
  })
  return { database, url: url.toString() }
}

export interface TestAppOptions {
  env?: EnvOverrides
  /** share a database between apps (two instances); otherwise each app gets its own */
  db?: TestDatabase
  /** extra routes a test needs (registered at the root, before the app is ready) */
  extend?: (app: FastifyInstance) => void | Promise<void>
  /** ports for the agent runtime (fake run directories, event recorders, sandbox providers) */
  runtime?: RuntimeWiring
}

/** The real app over a real database, closed at teardown. */
export async function buildTestApp(t: Teardown, options: TestAppOptions = {}): Promise<FastifyInstance & { testDb: TestDatabase }> {
  const db = options.db ?? (await createTestDatabase(t))
  const config = testConfig({ ...(db.url ? { DATABASE_URL: db.url } : {}), ...options.env })
  const app = await buildApp({ config, database: db.database, runtime: options.runtime })
  t.teardown(() => app.close())
  if (options.extend) await options.extend(app)
  await app.ready()
  return Object.assign(app, { testDb: db })
}
