import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { buildTestApp } from '../helper.js'

const onPostgres = Boolean(process.env.DATABASE_URL)

t.test(
  "the service's Postgres connections plan without JIT (a long queue made the run claim compile for 80 ms)",
  {
    skip: onPostgres ? false : 'PGlite has no JIT'
  },
  async (t) => {
    const app = await buildTestApp(t)
    const [row] = rowsOf<{ jit: string }>(await app.db.execute(sql`show jit`))
    t.equal(row!.jit, 'off')
    const [app_] = rowsOf<{ name: string }>(
      await app.db.execute(sql`select current_setting('application_name') as name`)
    )
    t.equal(app_!.name, 'cairn')
  }
)
