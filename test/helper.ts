import { randomBytes } from 'node:crypto'
import type { Clock } from '../src/worker-loop.js'
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import postgres from 'postgres'
import { sql } from 'drizzle-orm'
import tap from 'tap'
import type { BlobStore } from '../src/artifacts/blob-store.js'
import type { Extractor } from '../src/knowledge/document-worker.js'
import { testConfig, type Env } from '../src/config.js'
import { openDatabase, rowsOf, type Database } from '../src/db/client.js'
import { migrateDatabase } from '../src/db/migrate.js'
import type { RunEventSink, RunMemory } from '../src/runs/ports/memory.js'
import type { RuntimeWiring } from '../src/runtime/service.js'
import { pgliteSchemaTemplate, postgresSchemaTemplate } from './templates.js'

/** The bits of a tap Test the helpers need (teardown). */
export interface Teardown {
  teardown(fn: () => unknown): void
}

export type EnvOverrides = Partial<Record<keyof Env, string>>

/** A config for tests: quiet logs, test mode, plus overrides. */
export { testConfig }

export interface TestDatabase {
  database: Database
  /** the real Postgres url of this test's own database, when running against Postgres */
  url: string | undefined
}

/**
 * A fresh, migrated database for a test: an in-memory PGlite by default, or a new
 * database on the server named by DATABASE_URL. Test files run in parallel without
 * sharing rows. Both start from a migrated template of this checkout's migrations
 * (test/templates.ts); migrating then finds nothing to do.
 *
 * When the test ends, its database is emptied (every table truncated, identities
 * restarted: the state of a new one) and kept for the next test of the same file, which
 * saves opening PGlite (about 3 s of CPU) or creating and dropping a Postgres database
 * each time. One whose tables changed, that no longer answers or cannot be emptied is
 * closed instead. The file's last test closes them all (and drops them on Postgres).
 */
export async function createTestDatabase(t: Teardown): Promise<TestDatabase> {
  const db = idleDatabases.pop() ?? (await openTestDatabase())
  t.teardown(() => releaseTestDatabase(db))
  return db
}

/** Emptied databases waiting for the next test of this file, and how to close each. */
const idleDatabases: TestDatabase[] = []
const closers = new Map<TestDatabase, () => Promise<void>>()
/** The tables of the migrated schema: a database with other tables is not reused. */
const TABLES = sql`select string_agg(format('%I.%I', schemaname, tablename), ', ' order by tablename) as list
  from pg_tables where schemaname = 'public'`
let schemaTables: string | undefined

tap.teardown(async () => {
  idleDatabases.length = 0
  for (const close of closers.values()) await close().catch(() => {})
})

async function openTestDatabase(): Promise<TestDatabase> {
  const serverUrl = process.env.DATABASE_URL
  let db: TestDatabase
  if (!serverUrl) {
    const database = await openDatabase({ dataDir: 'memory://', template: await pgliteSchemaTemplate() })
    await migrateDatabase(database)
    db = { database, url: undefined }
    closers.set(db, () => database.close())
  } else {
    const name = `cairn_test_${process.pid}_${randomBytes(4).toString('hex')}`
    const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
    await admin.unsafe(`create database "${name}" template "${await postgresSchemaTemplate(serverUrl)}"`)
    const url = new URL(serverUrl)
    url.pathname = `/${name}`
    const database = await openDatabase({ url: url.toString(), poolMax: 10 })
    await migrateDatabase(database, url.toString())
    db = { database, url: url.toString() }
    closers.set(db, async () => {
      await database.close().catch(() => {})
      await admin.unsafe(`drop database if exists "${name}" with (force)`)
      await admin.end()
    })
  }
  schemaTables ??= rowsOf<{ list: string }>(await db.database.db.execute(TABLES))[0]!.list
  return db
}

/** `TEST_FRESH_DATABASES=1`: every test gets a new database (to rule reuse out of a failure). */
const reuse = process.env.TEST_FRESH_DATABASES !== '1'

async function releaseTestDatabase(db: TestDatabase): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  try {
    const late = new Promise<never>(
      (_, reject) => (timer = setTimeout(() => reject(new Error('the database did not answer')), 10_000))
    )
    await Promise.race([
      late,
      db.database.db.transaction(async (tx) => {
        // a lock another connection still holds (a killed child's) is a reason to give up, not to wait
        await tx.execute(sql`set local lock_timeout = '2s'`)
        const [tables] = rowsOf<{ list: string }>(await tx.execute(TABLES))
        if (!reuse || tables?.list !== schemaTables) throw new Error('not to be reused')
        await tx.execute(sql.raw(`truncate ${schemaTables} restart identity cascade`))
      })
    ])
    idleDatabases.push(db)
  } catch {
    const close = closers.get(db)
    closers.delete(db)
    await close?.().catch(() => {})
  } finally {
    clearTimeout(timer)
  }
}

/**
 * What a second instance would use on the same database: its own pool on Postgres (as a
 * second process has), the same embedded object on PGlite. Closed at teardown.
 */
export async function secondHandle(t: Teardown, shared: TestDatabase, poolMax = 10): Promise<TestDatabase> {
  if (!shared.url) return shared
  const database = await openDatabase({ url: shared.url, poolMax })
  t.teardown(() => database.close())
  return { database, url: shared.url }
}

export interface TestAppOptions {
  env?: EnvOverrides
  /** share a database between apps (two instances); otherwise each app gets its own */
  db?: TestDatabase
  /** extra routes a test needs (registered at the root, before the app is ready) */
  extend?: (app: FastifyInstance) => void | Promise<void>
  /** extra route groups inside the /api scope (principal, scopes and guards apply to them) */
  apiPlugins?: FastifyPluginAsync[]
  /** the Memory Hub side of runs */
  runMemory?: RunMemory
  /** where a run's events go from outside the runs group (a recorder) */
  runEvents?: RunEventSink
  /** ports for the agent runtime (fake run directories, event recorders, sandbox providers) */
  runtime?: RuntimeWiring
  /** where upload and artifact bytes go (an S3 store against a local server) */
  blobStore?: BlobStore
  /** the time automations are scheduled by (a test's clock) */
  clock?: Clock
  /** how knowledge documents become Markdown, instead of the extraction child process */
  knowledgeExtractor?: Extractor
  /** collects the app's log lines (parsed JSON, level info and up) */
  logs?: Array<Record<string, unknown>>
}

/** The real app over a real database, closed at teardown. */
export async function buildTestApp(
  t: Teardown,
  options: TestAppOptions = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  const db = options.db ?? (await createTestDatabase(t))
  // every app gets its own files (blobs, sandboxes) unless the test names a DATA_DIR
  let dataDir = options.env?.DATA_DIR
  if (dataDir === undefined) {
    const own = mkdtempSync(join(tmpdir(), 'cairn-test-data-'))
    t.teardown(() => rmSync(own, { recursive: true, force: true }))
    dataDir = own
  }
  const config = testConfig({
    ...(db.url ? { DATABASE_URL: db.url } : {}),
    ...(options.logs ? { LOG_LEVEL: 'info' } : {}),
    ...options.env,
    DATA_DIR: dataDir
  })
  // loaded when first needed: a file that boots one group (test/group-app.ts) never loads the whole app
  const { buildApp } = await import('../src/app.js')
  const app = await buildApp({
    config,
    database: db.database,
    ...(options.apiPlugins ? { apiPlugins: options.apiPlugins } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.logs
      ? { logStream: { write: (line: string) => void options.logs!.push(JSON.parse(line) as Record<string, unknown>) } }
      : {}),
    ports: {
      ...(options.runMemory ? { runMemory: options.runMemory } : {}),
      ...(options.runEvents ? { runEvents: options.runEvents } : {}),
      ...(options.runtime ? { runtime: options.runtime } : {}),
      ...(options.blobStore ? { blobStore: options.blobStore } : {}),
      ...(options.knowledgeExtractor ? { knowledgeExtractor: options.knowledgeExtractor } : {})
    }
  })
  t.teardown(() => app.close())
  if (options.extend) await options.extend(app)
  await app.ready()
  return Object.assign(app, { testDb: db })
}

// ---------------------------------------------------------------------------------
// Identity helpers: real sign-ups, orgs and keys through the API, for any test file.

export interface TestUser {
  id: string
  email: string
  name: string
  createdAt: string
}

export interface SignedIn {
  /** a ready `cookie` header value: `cairn_session=<token>` */
  cookie: string
  /** the raw session token */
  token: string
  user: TestUser
  password: string
}

let unique = 0
/** A fresh, unused email address. */
export function uniqueEmail(prefix = 'user'): string {
  unique += 1
  return `${prefix}-${process.pid}-${unique}-${randomBytes(3).toString('hex')}@example.test`
}

/** The session cookie a response set, as a `cookie` header value (throws when none was set). */
export function sessionCookieOf(res: { cookies: Array<{ name: string; value: string }> }): {
  cookie: string
  token: string
} {
  const set = res.cookies.find((c) => c.name === 'cairn_session' || c.name === '__Host-cairn_session')
  if (!set || set.value === '') throw new Error('no session cookie was set')
  return { cookie: `${set.name}=${set.value}`, token: set.value }
}

/** Signs up a new user (POST /api/auth/sign-up) and returns its session cookie. The user has no org yet. */
export async function signUp(
  app: FastifyInstance,
  opts: { email?: string; password?: string; name?: string } = {}
): Promise<SignedIn> {
  const email = opts.email ?? uniqueEmail()
  const password = opts.password ?? 'correct horse battery staple'
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sign-up',
    payload: { email, password, name: opts.name ?? 'Test User' }
  })
  if (res.statusCode !== 201) throw new Error(`sign-up failed: ${res.statusCode} ${res.body}`)
  return { ...sessionCookieOf(res), user: res.json().user, password }
}

/** Signs in again (a new session and cookie). */
export async function signIn(app: FastifyInstance, email: string, password: string): Promise<SignedIn> {
  const res = await app.inject({ method: 'POST', url: '/api/auth/sign-in', payload: { email, password } })
  if (res.statusCode !== 200) throw new Error(`sign-in failed: ${res.statusCode} ${res.body}`)
  return { ...sessionCookieOf(res), user: res.json().user, password }
}

export interface TestOrg {
  id: string
  name: string
  slug: string
}

/** Creates an org as the cookie's user (who becomes owner; the org becomes the session's active org). */
export async function createOrg(
  app: FastifyInstance,
  cookie: string,
  name = `Org ${randomBytes(3).toString('hex')}`,
  slug?: string
): Promise<TestOrg> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/organizations',
    headers: { cookie },
    payload: { name, ...(slug ? { slug } : {}) }
  })
  if (res.statusCode !== 201) throw new Error(`create org failed: ${res.statusCode} ${res.body}`)
  return res.json().organization
}

/** A signed-up user who owns a fresh org that is their active org. */
export async function signUpWithOrg(
  app: FastifyInstance,
  opts: { email?: string; name?: string; org?: string } = {}
): Promise<SignedIn & { org: TestOrg }> {
  const user = await signUp(app, opts)
  const org = await createOrg(app, user.cookie, opts.org)
  return { ...user, org }
}

/** Adds an existing user to an org as the cookie's user (owner or admin there). */
export async function addMember(
  app: FastifyInstance,
  cookie: string,
  orgId: string,
  email: string,
  role: 'owner' | 'admin' | 'member'
) {
  const res = await app.inject({
    method: 'POST',
    url: `/api/auth/organizations/${orgId}/members`,
    headers: { cookie },
    payload: { email, role }
  })
  if (res.statusCode !== 201) throw new Error(`add member failed: ${res.statusCode} ${res.body}`)
  return res.json().member
}

/** Mints an API key in the cookie's active org; `authorization` is a ready header value. */
export async function mintKey(
  app: FastifyInstance,
  cookie: string,
  name = 'test key'
): Promise<{ id: string; key: string; authorization: string }> {
  const res = await app.inject({ method: 'POST', url: '/api/keys', headers: { cookie }, payload: { name } })
  if (res.statusCode !== 201) throw new Error(`mint key failed: ${res.statusCode} ${res.body}`)
  const { id, key } = res.json()
  return { id, key, authorization: `Bearer ${key}` }
}

/** Polls `check` until it returns something truthy (for state with no event to await), or fails after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | null | false>,
  timeoutMs = 15_000
): Promise<T> {
  const until = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 15))
  }
}

// `TEST_CPU_LOG=<file> npm test`: each test file that uses these helpers appends the CPU
// seconds its process spent (its database thread included) and its name, to find the
// files that cost the suite most on a loaded machine, where wall times say little.
const cpuLog = process.env.TEST_CPU_LOG
if (cpuLog) {
  process.on('exit', () => {
    const { user, system } = process.cpuUsage()
    appendFileSync(cpuLog, `${((user + system) / 1e6).toFixed(1)} ${relative(process.cwd(), process.argv[1] ?? '?')}\n`)
  })
}
