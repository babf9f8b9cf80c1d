// Migrated schemas the tests' databases start from. Applying the migrations took about 2.5 s
// of CPU for every test database on either engine (several hundred databases a suite run);
// copying an already migrated one takes a fraction of that. The first test process that
// needs a template for this checkout's migrations makes it (on PGlite two may race: each
// writes its own file and renames it into place; on Postgres an advisory lock lets one).
import { createHash } from 'node:crypto'
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync
} from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { PGlite } from '@electric-sql/pglite'
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm'
import { vector } from '@electric-sql/pglite-pgvector'
import postgres from 'postgres'
import { openDatabase } from '../src/db/client.js'
import { migrateDatabase, migrationsFolder } from '../src/db/migrate.js'
import { unpackedBundle } from '../src/db/pglite-extensions.js'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const BUILDS = join(root, '.build')

let hashOnce: string | undefined
/** The migrations (every file, in order) and the PGlite version: a template is made of these. */
function schemaHash(): string {
  if (hashOnce) return hashOnce
  const hash = createHash('sha256')
  const folder = migrationsFolder()
  const files = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]
    )
  for (const file of files(folder).sort()) hash.update(file.slice(folder.length)).update(readFileSync(file))
  const pglite = createRequire(join(root, 'package.json')).resolve('@electric-sql/pglite')
  hash.update(readFileSync(join(dirname(pglite), '..', 'package.json')))
  return (hashOnce = hash.digest('hex').slice(0, 16))
}

let pgliteOnce: Promise<string> | undefined
/** The embedded template's file for these migrations, made first if there is none. */
export function pgliteSchemaTemplate(): Promise<string> {
  return (pgliteOnce ??= makePgliteTemplate())
}

const postgresOnce = new Map<string, Promise<string>>()
/** The name of the Postgres template database for these migrations, made first if there is none. */
export function postgresSchemaTemplate(serverUrl: string): Promise<string> {
  let made = postgresOnce.get(serverUrl)
  if (!made) postgresOnce.set(serverUrl, (made = makePostgresTemplate(serverUrl)))
  return made
}

/** Migrates a data directory and dumps it, unless the dump exists. */
async function makePgliteTemplate(): Promise<string> {
  const file = join(BUILDS, `test-schema-${schemaHash()}.tar`)
  if (existsSync(file)) return file
  const dir = mkdtempSync(join(tmpdir(), 'cairn-schema-'))
  try {
    const database = await openDatabase({ dataDir: dir })
    await migrateDatabase(database)
    await database.close()
    const lite = await PGlite.create(join(dir, 'pglite'), {
      extensions: { pg_trgm: unpackedBundle(pg_trgm), vector: unpackedBundle(vector) }
    })
    const dump = await lite.dumpDataDir('none')
    await lite.close()
    // npm's prepare makes it; a checkout that skipped it (a worktree sharing node_modules) has none
    mkdirSync(BUILDS, { recursive: true })
    for (const old of readdirSync(BUILDS)) {
      if (old.startsWith('test-schema-') && !old.includes(schemaHash())) rmSync(join(BUILDS, old), { force: true })
    }
    const temp = join(BUILDS, `tmp-${process.pid}-test-schema.tar`)
    writeFileSync(temp, new Uint8Array(await dump.arrayBuffer()))
    renameSync(temp, file)
    return file
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** Any constant of the test suite's own: one process at a time makes the Postgres template. */
const TEMPLATE_LOCK = 0x636169726e74 // "cairnt"

/**
 * Makes the Postgres template database unless it exists, under a session advisory lock.
 * Templates of other migration sets stay (another checkout may be testing with its own);
 * `cairn_template_*` databases are the suite's, safe to drop when no test runs.
 */
async function makePostgresTemplate(serverUrl: string): Promise<string> {
  const name = `cairn_template_${schemaHash()}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    const [ready] = await admin`select 1 from pg_database where datname = ${name}`
    if (ready) return name
    await admin`select pg_advisory_lock(${TEMPLATE_LOCK})`
    const [made] = await admin`select 1 from pg_database where datname = ${name}`
    if (made) return name
    const building = `${name}_${process.pid}`
    await admin.unsafe(`create database "${building}"`)
    const url = new URL(serverUrl)
    url.pathname = `/${building}`
    const database = await openDatabase({ url: url.toString(), poolMax: 1 })
    await migrateDatabase(database, url.toString())
    await database.close()
    await admin.unsafe(`alter database "${building}" rename to "${name}"`)
    return name
  } finally {
    await admin.end()
  }
}
