// A statement planned each time goes to Postgres with its values written into its text
// (one round trip instead of two): each value must read back as itself, whatever the
// server's standard_conforming_strings says, and a value without a plain spelling stays a
// parameter.
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf, withConstants } from '../../src/db/client.js'
import { createTestDatabase } from '../helper.js'

const HOSTILE = ["it's", 'back\\slash', "\\'; drop table runs; --", "E'x'", '$1 $2', 'naïve ✓', '', "''", '\\\\']

for (const conforming of ['on', 'off'])
  t.test(`strings read back as themselves with standard_conforming_strings ${conforming}`, async (t) => {
    const { database } = await createTestDatabase(t)
    for (const value of HOSTILE) {
      const sent = withConstants('select $1::text as a, $2::int as b, $3::boolean as c, $4::text as d', [
        value,
        -5,
        true,
        null
      ])
      t.same(sent.parameters, [], `${JSON.stringify(value)} is written into the text`)
      const rows = await database.db.transaction(async (tx) => {
        await tx.execute(sql.raw(`set local standard_conforming_strings = ${conforming}`))
        return rowsOf<{ a: string; b: number; c: boolean; d: null }>(await tx.execute(sql.raw(sent.query)))
      })
      t.same(rows, [{ a: value, b: -5, c: true, d: null }], JSON.stringify(value))
    }
  })

t.test('a value without a plain spelling keeps every value a parameter', async (t) => {
  for (const odd of ['nul\0byte', Number.NaN, { a: 1 }, [1, 2]]) {
    const sent = withConstants('select $1 as a, $2 as b', ['plain', odd])
    t.equal(sent.query, 'select $1 as a, $2 as b')
    t.same(sent.parameters, ['plain', odd])
  }
})
