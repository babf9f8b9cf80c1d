// The embedded database's thread keeps no answer after it has sent it: the service holds
// one connection for its whole life, so anything kept per answer grows without end.
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import postgres from 'postgres'
import { PgliteThread } from '../../src/db/pglite-thread.js'

t.test('the database thread serves answer after answer in a small heap', { skip: embeddedPassOnly }, async (t) => {
  // 2,000 answers of about 100 KB: kept, their parsed rows alone would pass 200 MB
  const thread = await PgliteThread.start('memory://', { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 16 })
  // `socket` (as src/db/client.ts passes it) is a postgres.js option its types leave out
  const pg = postgres({
    max: 1,
    socket: () => thread.socket(),
    username: 'postgres',
    database: 'postgres',
    onnotice: () => {}
  } as postgres.Options<Record<string, never>>)
  t.teardown(async () => {
    await pg.end({ timeout: 5 })
    await thread.close()
  })
  let rows = 0
  for (let i = 0; i < 2000; i++) {
    const answer = await pg`select g, repeat('x', 500) as padding from generate_series(1, 200) as g`
    rows += answer.length
  }
  t.equal(rows, 2000 * 200, 'every answer arrived whole')
  t.same(await pg`select 1 as one`, [{ one: 1 }], 'the thread still answers')
})
