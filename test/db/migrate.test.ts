import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { migrate } from 'drizzle-orm/pglite/migrator'
import t from 'tap'
import { openDatabase, rowsOf } from '../../src/db/client.js'
import { migrateDatabase, migrationsFolder } from '../../src/db/migrate.js'
import { createTestDatabase } from '../helper.js'
import { jsonOf } from '../../src/db/rows.js'

const journal = JSON.parse(readFileSync(join(migrationsFolder(), 'meta', '_journal.json'), 'utf8')) as {
  entries: unknown[]
}

t.test('migrations apply once, and again is a no-op', async (t) => {
  const { database, url } = await createTestDatabase(t)
  // createTestDatabase migrated it already: this is the second run
  t.same(await migrateDatabase(database, url), { applied: 0, total: journal.entries.length }, 'reports none to apply')
  const applied = rowsOf<{ n: number }>(
    await database.db.execute(sql`select count(*)::int as n from drizzle.__drizzle_migrations`)
  )
  t.equal(applied[0]!.n, journal.entries.length)
  const fresh = await openDatabase({ dataDir: 'memory://' })
  t.teardown(() => fresh.close())
  t.same(
    await migrateDatabase(fresh),
    { applied: journal.entries.length, total: journal.entries.length },
    'a new database reports every migration applied'
  )
})

t.test(
  'two instances booting at once on one Postgres migrate exactly once',
  { skip: !process.env.DATABASE_URL && 'needs DATABASE_URL' },
  async (t) => {
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
    const applied = rowsOf<{ n: number }>(
      await a.db.execute(sql`select count(*)::int as n from drizzle.__drizzle_migrations`)
    )
    t.equal(applied[0]!.n, journal.entries.length, 'one row per migration')
    const tables = rowsOf<{ n: number }>(
      await b.db.execute(
        sql`select count(*)::int as n from information_schema.tables where table_name = 'organizations'`
      )
    )
    t.equal(tables[0]!.n, 1)
  }
)

t.test('0017 upgrades the fleet usage rollup: the hours are built from the quarter hours already kept', async (t) => {
  const full = JSON.parse(readFileSync(join(migrationsFolder(), 'meta', '_journal.json'), 'utf8')) as {
    entries: Array<{ tag: string }>
  }
  const upTo = full.entries.findIndex((e) => e.tag === '0017_usage_hours')
  t.ok(upTo > 0, '0017 is in the journal')
  // the migrations folder as it was before 0017
  const before = mkdtempSync(join(tmpdir(), 'cairn-migrations-'))
  t.teardown(() => rmSync(before, { recursive: true, force: true }))
  cpSync(migrationsFolder(), before, { recursive: true })
  writeFileSync(
    join(before, 'meta', '_journal.json'),
    JSON.stringify({ ...full, entries: full.entries.slice(0, upTo) })
  )
  const database = await openDatabase({ dataDir: 'memory://' })
  t.teardown(() => database.close())
  const db = database.db as unknown as Parameters<typeof migrate>[0]
  await migrate(db, { migrationsFolder: before })
  await db.execute(sql`insert into organizations (id, name, slug) values ('o1', 'o', 'o')`)
  // finished under the old trigger: 10:05Z, 10:50Z (one hour, two quarters), 18:40Z in another engine
  for (const [i, [at, engine]] of [
    ['2026-07-10T10:05:00Z', 'echo'],
    ['2026-07-10T10:50:00Z', 'echo'],
    ['2026-07-10T18:40:00Z', 'openai']
  ].entries()) {
    await db.execute(sql`insert into runs (id, org_id, root_run_id, engine, prompt, status, origin, created_at, started_at, finished_at, input_tokens)
      values (${`r${i}`}, 'o1', ${`r${i}`}, ${engine}, 'p', 'succeeded', 'api', ${at}, ${at}, ${at}, 7)`)
  }
  t.same(
    await migrateDatabase(database),
    { applied: full.entries.length - upTo, total: full.entries.length },
    'the rest applies'
  )
  const hours = rowsOf<{ hour: string; runs: number; input: number }>(
    await db.execute(sql`
    select to_char(hour at time zone 'UTC', 'HH24:MI') as hour, runs, input_tokens::int as input from usage_hours where org_id = 'o1' order by hour`)
  )
  t.same(
    hours,
    [
      { hour: '10:00', runs: 2, input: 14 },
      { hour: '18:00', runs: 1, input: 7 }
    ],
    'one row per hour, summed'
  )
  const groups = rowsOf<{ n: number }>(
    await db.execute(sql`select count(*)::int as n from usage_hour_groups where org_id = 'o1'`)
  )
  t.equal(groups[0]!.n, 2, 'and per engine')
  t.equal(
    rowsOf<{ t: string | null }>(await db.execute(sql`select to_regclass('usage_slots')::text as t`))[0]!.t,
    null,
    'the ungrouped quarter hours are gone'
  )
  // a run finishing after the upgrade goes to both grains
  await db.execute(sql`insert into runs (id, org_id, root_run_id, engine, prompt, status, origin, created_at, started_at, finished_at)
    values ('r9', 'o1', 'r9', 'echo', 'p', 'succeeded', 'api', '2026-07-10T10:59:59Z', '2026-07-10T10:59:59Z', '2026-07-10T10:59:59Z')`)
  const after = rowsOf<{ hour: number; quarter: number }>(
    await db.execute(sql`
    select (select runs from usage_hours where org_id = 'o1' and hour = '2026-07-10T10:00:00Z') as hour,
           (select sum(runs)::int from usage_slot_groups where org_id = 'o1' and slot = '2026-07-10T10:45:00Z') as quarter`)
  )
  t.same(after, [{ hour: 3, quarter: 2 }], 'the new trigger keeps both grains')
})

t.test(
  "0018 and 0019 keep a succeeded run's answer on the run, copied from its message.completed event; 0034 makes it a transcript",
  async (t) => {
    const full = JSON.parse(readFileSync(join(migrationsFolder(), 'meta', '_journal.json'), 'utf8')) as {
      entries: Array<{ tag: string }>
    }
    const upTo = full.entries.findIndex((e) => e.tag === '0018_run_results')
    t.ok(upTo > 0, '0018 is in the journal')
    const before = mkdtempSync(join(tmpdir(), 'cairn-migrations-'))
    t.teardown(() => rmSync(before, { recursive: true, force: true }))
    cpSync(migrationsFolder(), before, { recursive: true })
    writeFileSync(
      join(before, 'meta', '_journal.json'),
      JSON.stringify({ ...full, entries: full.entries.slice(0, upTo) })
    )
    const database = await openDatabase({ dataDir: 'memory://' })
    t.teardown(() => database.close())
    const db = database.db as unknown as Parameters<typeof migrate>[0]
    await migrate(db, { migrationsFolder: before })
    await db.execute(sql`insert into organizations (id, name, slug) values ('o1', 'o', 'o')`)
    for (const [id, status] of [
      ['ok', 'succeeded'],
      ['pruned', 'succeeded'],
      ['bad', 'failed']
    ]) {
      await db.execute(
        sql`insert into runs (id, org_id, root_run_id, engine, prompt, status, origin) values (${id}, 'o1', ${id}, 'echo', 'p', ${status}, 'api')`
      )
    }
    for (const [run, text] of [
      ['ok', 'first draft'],
      ['ok', 'the answer'],
      ['bad', 'half an answer']
    ]) {
      await db.execute(
        sql`insert into run_events (org_id, run_id, root_run_id, type, data) values ('o1', ${run}, ${run}, 'message.completed', ${JSON.stringify({ text })}::jsonb)`
      )
    }
    t.same(
      await migrateDatabase(database),
      { applied: full.entries.length - upTo, total: full.entries.length },
      'the rest applies'
    )
    const rows = rowsOf<{ id: string; output: string | null; settings: unknown; attachments: unknown }>(
      await db.execute(sql`select id, output, settings, attachments from runs order by id`)
    )
    t.same(
      rows.map((r) => [r.id, r.output]),
      [
        ['bad', null],
        ['ok', 'the answer'],
        ['pruned', null]
      ],
      'the last answer of a succeeded run; none without its event or for a failed run'
    )
    t.same(
      rows.map((r) => [jsonOf(r.settings), jsonOf(r.attachments)]),
      [
        [{}, []],
        [{}, []],
        [{}, []]
      ]
    ) // 0034: a succeeded run from before transcripts is replayed as its prompt and answer
    t.same(
      rowsOf(await db.execute(sql`select run_id, seq, role, content from run_messages order by run_id, seq`)),
      [
        { run_id: 'ok', seq: 0, role: 'user', content: 'p' },
        { run_id: 'ok', seq: 1, role: 'assistant', content: 'the answer' }
      ],
      'transcripts back-filled for succeeded runs with an answer'
    )
  }
)

t.test('newest-first listings read their index in order, never sort a pool', async (t) => {
  const { database } = await createTestDatabase(t)
  const { db } = database
  // drizzle's `.desc()` makes an index DESC NULLS LAST, which `order by id desc` (NULLS FIRST)
  // cannot use: every newest-first walk of a pool then sorted all of it (160 ms for 10,000 facts)
  const reversed = rowsOf<{ indexname: string }>(
    await db.execute(
      sql`select indexname from pg_indexes where schemaname = current_schema() and indexdef like '%DESC NULLS LAST%'`
    )
  )
  t.same(reversed, [], 'no index is ordered DESC NULLS LAST')
  await db.execute(sql`set enable_seqscan = off`)
  t.teardown(() => db.execute(sql`reset enable_seqscan`))
  const plan = rowsOf<{ 'QUERY PLAN': string }>(
    await db.execute(
      sql`explain select id from memory_items where org_id = 'o' and pool_id = 'p' order by id desc limit 10`
    )
  )
    .map((r) => r['QUERY PLAN'])
    .join('\n')
  t.match(plan, /memory_items_pool_newest_idx/, 'the pool index is read')
  t.notMatch(plan, /Sort/, 'in its order, backwards')
})
