import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { openDatabase, rowsOf } from '../../src/db/client.js'
import { migrateDatabase, migrationsFolder } from '../../src/db/migrate.js'
import { createTestDatabase } from '../helper.js'

const journal = JSON.parse(readFileSync(join(migrationsFolder(), 'meta', '_journal.json'), 'utf8')) as { entries: unknown[] }

t.test('migrations apply once, and again is a no-op', async (t) => {
  const { database, url } = await createTestDatabase(t)
  // createTestDatabase migrated it already: this is the second run
  t.same(await migrateDatabase(database, url), { applied: 0, total: journal.entries.length }, 'reports none to apply')
  const applied = rowsOf<{ n: number }>(await database.db.execute(sql`select count(*)::int as n from drizzle.__drizzle_migrations`))
  t.equal(applied[0]!.n, journal.entries.length)
  const fresh = await openDatabase({ dataDir: 'memory://' })
  t.teardown(() => fresh.close())
  t.same(await migrateDatabase(fresh), { applied: journal.entries.length, total: journal.entries.length }, 'a new database reports every migration applied')
})

t.test('two instances booting at once on one Postgres migrate exactly once', { skip: !process.env.DATABASE_URL && 'needs DATABASE_URL' }, async (t) => {
  const { url } = await createTestDatabase(t)
  // a brand-new database next to the test one, migrated by two clients racing
  const fresh = new URL(url!)
  fresh.pathname = `${fresh.pathname}_race`
  const admin = await openDatabase({ url: url!, poolMax: 1 })
  await admin.db.execute(sql.raw(`create database "${fresh.pathname.slice(1)}"`))
  const a = await openDatabase({ url: fresh.toString(), poolMax: 2 })
  const b = await openDatabase({ url: fresh.toString(), poolMax: 2 })
  t.teardown(async () => {
    await a.close()
    await b.close()
    await admin.db.execute(sql.raw(`drop database if exists "${fresh.pathname.slice(1)}" with (force)`))
    await admin.close()
  })
  const reports = await Promise.all([migrateDatabase(a, fresh.toString()), migrateDatabase(b, fresh.toString())])
  t.same(reports.map((r) => r.applied).sort(), [0, journal.entries.length], 'one applied them all, the other none')
  const applied = rowsOf<{ n: number }>(await a.db.execute(sql`select count(*)::int as n from drizzle.__drizzle_migrations`))
  t.equal(applied[0]!.n, journal.entries.length, 'one row per migration')
  const tables = rowsOf<{ n: number }>(await b.db.execute(sql`select count(*)::int as n from information_schema.tables where table_name = 'organizations'`))
  t.equal(tables[0]!.n, 1)
})
