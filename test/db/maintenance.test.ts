// The embedded database's autovacuum (src/db/maintenance.ts): PGlite runs no background
// processes, so the service vacuums and analyzes what autovacuum would. These tests run
// on an embedded database whatever DATABASE_URL says: a real server has its own autovacuum.
import t from 'tap'
import { sql } from 'drizzle-orm'
import { openDatabase, rowsOf, type Database } from '../../src/db/client.js'
import { maintainEmbedded } from '../../src/db/maintenance.js'
import { migrateDatabase } from '../../src/db/migrate.js'
import { buildTestApp, waitFor, type Teardown } from '../helper.js'

async function embedded(t: Teardown): Promise<Database> {
  const database = await openDatabase({ dataDir: 'memory://' })
  await migrateDatabase(database)
  t.teardown(() => database.close())
  return database
}

async function tableState(database: Database, table: string) {
  const [row] = rowsOf<{ reltuples: number; stats: number | string }>(
    await database.db.execute(sql`
    select c.reltuples, (select count(*) from pg_stats s where s.tablename = c.relname) as stats
    from pg_class c where c.relname = ${table}`)
  )
  return { rows: Number(row!.reltuples), stats: Number(row!.stats) }
}

/** The planner's row estimate for `where n < 100` (100 rows match). */
async function estimate(database: Database): Promise<number> {
  const [row] = rowsOf<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }>(
    await database.db.execute(sql`
    explain (format json) select * from maintenance_probe where n < 100`)
  )
  return row!['QUERY PLAN'][0]!.Plan['Plan Rows']
}

t.test('a pass vacuums and analyzes what autovacuum would, and only that', async (t) => {
  const database = await embedded(t)
  const db = database.db
  await db.execute(sql`create table maintenance_probe (n int primary key, word text)`)
  await db.execute(sql`insert into maintenance_probe select g, 'word ' || g from generate_series(1, 5000) g`)
  t.same(await tableState(database, 'maintenance_probe'), { rows: -1, stats: 0 }, 'never vacuumed nor analyzed')
  const guessed = await estimate(database)

  const first = await maintainEmbedded(db)
  t.same(
    first.find((s) => s.table === 'public.maintenance_probe'),
    { table: 'public.maintenance_probe', vacuum: true, analyze: true },
    '5,000 rows inserted: vacuumed (inserts) and analyzed (changes)'
  )
  t.same(
    await tableState(database, 'maintenance_probe'),
    { rows: 5000, stats: 2 },
    'its size and a statistics row per column are known'
  )
  t.equal(await estimate(database), 99, `the planner estimates 99 rows for 100 (it guessed ${guessed} before)`)

  const second = await maintainEmbedded(db)
  t.notOk(
    second.some((s) => s.table === 'public.maintenance_probe'),
    'nothing changed since: not taken again'
  )

  // 600 rows changed: past the analyze threshold (50 + 10% of 5,000), not the vacuum one (50 + 20%)
  await db.execute(sql`update maintenance_probe set word = 'changed' where n <= 600`)
  t.same(
    (await maintainEmbedded(db)).find((s) => s.table === 'public.maintenance_probe'),
    { table: 'public.maintenance_probe', vacuum: false, analyze: true },
    '600 rows changed: analyzed, not vacuumed'
  )

  // 600 more dead rows (1,200 in all): past the vacuum threshold
  await db.execute(sql`delete from maintenance_probe where n > 4400`)
  t.same(
    (await maintainEmbedded(db)).find((s) => s.table === 'public.maintenance_probe'),
    { table: 'public.maintenance_probe', vacuum: true, analyze: true },
    '1,200 dead rows: vacuumed and analyzed'
  )
  t.equal((await tableState(database, 'maintenance_probe')).rows, 4400, 'its size follows')
})

t.test('a table never analyzed is analyzed even when its counters were lost', async (t) => {
  const database = await embedded(t)
  const db = database.db
  await db.execute(sql`create table lost_counters (n int)`)
  await db.execute(sql`insert into lost_counters select generate_series(1, 1000)`)
  // what a crash does to the counters (they are kept only across a clean shutdown)
  await db.execute(sql`select pg_stat_reset()`)
  const steps = await maintainEmbedded(db)
  t.same(
    steps.find((s) => s.table === 'public.lost_counters'),
    { table: 'public.lost_counters', vacuum: false, analyze: true }
  )
  t.same(await tableState(database, 'lost_counters'), { rows: 1000, stats: 1 })
  t.notOk(
    (await maintainEmbedded(db)).some((s) => s.table === 'public.lost_counters'),
    'analyzed once'
  )
})

t.test('the service runs the passes on the embedded database and stops them when it closes', async (t) => {
  const database = await embedded(t)
  const app = await buildTestApp(t, { db: { database, url: undefined }, env: { EMBEDDED_MAINTENANCE_SECONDS: '1' } })
  await app.db.execute(sql`create table scheduled_probe (n int)`)
  await app.db.execute(sql`insert into scheduled_probe select generate_series(1, 2000)`)
  const state = await waitFor('the table analyzed by a scheduled pass', async () => {
    const s = await tableState(database, 'scheduled_probe')
    return s.stats > 0 ? s : null
  })
  t.same(state, { rows: 2000, stats: 1 })
  await app.close()
  t.pass('closed with the loop stopped (the database is closed after it)')
})
