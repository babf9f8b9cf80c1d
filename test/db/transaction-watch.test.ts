// The embedded database has one connection: a query on `db` inside a transaction would wait
// for the connection the transaction holds, forever. It is refused at once instead.
import { sql } from 'drizzle-orm'
import t from 'tap'
import { openDatabase, rowsOf } from '../../src/db/client.js'
import { embeddedPassOnly } from '../passes.js'

t.test('a query on db inside a transaction fails, naming the mistake', { skip: embeddedPassOnly }, async (t) => {
  const database = await openDatabase({ dataDir: 'memory://' })
  t.teardown(() => database.close())
  const { db } = database
  await db.execute(sql`create table notes (id int primary key)`)

  // drizzle reports a failed query with the driver's error as its cause
  const refused = await db
    .transaction(async (tx) => {
      await tx.execute(sql`insert into notes values (1)`)
      await db.execute(sql`select count(*) from notes`)
    })
    .then(
      () => null,
      (err: Error) => err
    )
  t.match(
    String((refused?.cause as Error | undefined)?.message),
    /a query on `db` inside `db\.transaction\(\)`.*Use the transaction's `tx`/s,
    'the query fails at once, naming the mistake'
  )
  t.same(rowsOf(await db.execute(sql`select id from notes`)), [], 'the transaction was rolled back')

  await t.rejects(
    db.transaction(async () => {
      await db.transaction(async (inner) => inner.execute(sql`select 1`))
    }),
    /inside `db\.transaction\(\)`/,
    'a second transaction on db inside the first, too'
  )

  // what stays allowed: tx inside, db after, and another caller's query waiting its turn
  const outside = db.transaction(async (tx) => {
    await tx.execute(sql`insert into notes values (2)`)
  })
  const meanwhile = db.execute(sql`select 1 as one`)
  await outside
  t.same(rowsOf(await meanwhile), [{ one: 1 }], 'a query from elsewhere waits for the transaction, then runs')
  await db.transaction(async (tx) => {
    await tx.transaction(async (savepoint) => savepoint.execute(sql`insert into notes values (3)`))
  })
  t.same(
    rowsOf(await db.execute(sql`select id from notes order by id`)),
    [{ id: 2 }, { id: 3 }],
    'after a transaction, db is free'
  )
})
