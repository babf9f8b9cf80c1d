// A statement built by drizzle once (src/db/built-once.ts): every execution sends its own
// values, as parameters of a prepared statement, or written into the text as constants
// when the statement is planned each time, and the text is built only at the first.
import { sql } from 'drizzle-orm'
import t from 'tap'
import { builtOnce } from '../../src/db/built-once.js'
import { PLAN_EACH_TIME, rowsOf } from '../../src/db/client.js'
import { createTestDatabase } from '../helper.js'

const VALUES = ["it's", 'back\\slash', "\\'; drop table runs; --", '$1 $2', 'naïve ✓', '']

t.test('each execution sends its own values; the text is built once', async (t) => {
  const { database } = await createTestDatabase(t)
  let builds = 0
  const prepared = builtOnce<{ a: string; n: number }>(['a', 'n'], (v) => {
    builds++
    return sql`select ${v.a}::text as a, ${v.n}::int as n, ${v.a}::text = ${v.a}::text as same`
  })
  const planned = builtOnce<{ a: string; n: number }>(['a', 'n'], (v) => {
    builds++
    return sql`${sql.raw(PLAN_EACH_TIME)} select ${v.a}::text as a, ${v.n}::int as n`
  })
  const sent: Array<{ query: string; parameters: readonly unknown[] }> = []
  const stop = database.onStatement((query, parameters) => sent.push({ query, parameters }))
  for (const [i, a] of VALUES.entries()) {
    t.same(rowsOf(await prepared(database.db, { a, n: i })), [{ a, n: i, same: true }], JSON.stringify(a))
    t.same(rowsOf(await planned(database.db, { a, n: -i })), [{ a, n: -i }], `${JSON.stringify(a)}, planned each time`)
  }
  stop()
  t.equal(builds, 2, 'each text built once')
  const plannedSent = sent.filter((s) => s.query.startsWith(PLAN_EACH_TIME))
  t.equal(plannedSent.length, VALUES.length, 'one statement each time')
  t.ok(
    plannedSent.every((s) => s.parameters.length === 0),
    'planned each time: the values are constants of the text'
  )
  t.same(
    sent.filter((s) => !s.query.startsWith(PLAN_EACH_TIME)).map((s) => s.parameters),
    VALUES.map((a, i) => [a, i, a, a]),
    'prepared: the values are its parameters'
  )
})

t.test('a missing value fails the execution before anything is sent', async (t) => {
  const { database } = await createTestDatabase(t)
  const select = builtOnce<{ a: string }>(['a'], (v) => sql`select ${v.a}::text as a`)
  const sent: string[] = []
  const stop = database.onStatement((query) => sent.push(query))
  await t.rejects(select(database.db, {} as { a: string }), /No value for placeholder "a"/)
  stop()
  t.same(sent, [], 'nothing sent')
})
