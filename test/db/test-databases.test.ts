import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { createTestDatabase, type TestDatabase } from '../helper.js'

// The tests' own databases: the next test of a file is handed the last one's database
// emptied, as a new one would be (test/helper.ts): every table empty, every sequence started
// again. Truncated, not deleted from: rows deleted leave their space to be reused once
// vacuumed, and the next test's rows then come back in another order than they went in.

let first: TestDatabase | undefined

t.test('a test writes rows, moves the event sequence past them and past a failed insert', async (t) => {
  first = await createTestDatabase(t)
  const { db } = first.database
  await db.execute(sql`insert into organizations (id, name, slug) values ('org_a', 'A', 'a'), ('org_b', 'B', 'b')`)
  await db.execute(sql`insert into users (id, email, name) values ('usr_a', 'a@example.com', 'A')`)
  await db.execute(sql`insert into members (org_id, user_id, role) values ('org_a', 'usr_a', 'owner')`)
  await db.execute(
    sql`insert into run_events (org_id, run_id, root_run_id, type) values ('org_a', 'run_a', 'run_a', 'run.queued')`
  )
  // a sequence value taken without a row left behind
  await db.execute(sql`select nextval('run_events_id_seq')`)
  const [{ n }] = rowsOf<{ n: number }>(await db.execute(sql`select count(*)::int as n from members`)) as [
    { n: number }
  ]
  t.equal(n, 1)
})

t.test('the next test of the file gets that database back as a new one', async (t) => {
  const again = await createTestDatabase(t)
  t.equal(again, first, 'the same database, reused')
  const { db } = again.database
  const tables = rowsOf<{ name: string }>(
    await db.execute(
      sql`select format('%I.%I', schemaname, tablename) as name from pg_tables where schemaname = 'public'`
    )
  ).map((r) => r.name)
  t.ok(tables.length > 50, 'the whole schema is there')
  const counts = rowsOf<{ name: string; n: number }>(
    await db.execute(
      sql.raw(
        tables.map((name) => `select '${name}' as name, (select count(*)::int from ${name}) as n`).join(' union all ')
      )
    )
  )
  t.same(
    counts.filter((c) => c.n > 0),
    [],
    'every table is empty'
  )
  const [event] = rowsOf<{ id: string }>(
    await db.execute(
      sql`insert into run_events (org_id, run_id, root_run_id, type) values ('org_a', 'run_a', 'run_a', 'run.queued') returning id`
    )
  )
  t.equal(Number(event!.id), 1, 'the event sequence starts again at 1')
})

t.test('a test that only moves a sequence, every table left empty', async (t) => {
  const db = (await createTestDatabase(t)).database.db
  await db.execute(sql`select nextval('run_events_id_seq')`)
  await db.execute(sql`select nextval('run_events_id_seq')`)
  t.pass()
})

t.test('…leaves the next one a sequence started again', async (t) => {
  const again = await createTestDatabase(t)
  t.equal(again, first, 'the same database, reused')
  const [event] = rowsOf<{ id: string }>(
    await again.database.db.execute(
      sql`insert into run_events (org_id, run_id, root_run_id, type) values ('org_a', 'run_a', 'run_a', 'run.queued') returning id`
    )
  )
  t.equal(Number(event!.id), 1)
})
