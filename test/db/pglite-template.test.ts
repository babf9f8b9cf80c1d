import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { ensurePgliteTemplate } from '../../scripts/build.mjs'
import { openDatabase, rowsOf } from '../../src/db/client.js'
import { migrateDatabase } from '../../src/db/migrate.js'
import { pgliteTemplate } from '../../src/db/pglite-template.js'

t.test(
  'a new data directory starts from the install-time template, and keeps what is written',
  { skip: embeddedPassOnly },
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-template-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    // npm ci made it; made here when missing (a checkout installed before it existed)
    t.ok(await ensurePgliteTemplate({ log: () => {} }), 'the template exists')
    const location = join(dataDir, 'pglite')
    mkdirSync(location)
    t.type(pgliteTemplate(location), Blob, 'an empty directory gets the template')

    const first = await openDatabase({ dataDir })
    t.ok(existsSync(join(location, 'PG_VERSION')), 'the files are on disk')
    t.equal(pgliteTemplate(location), undefined, 'an existing database never does')
    await migrateDatabase(first)
    await first.db.execute(sql`create table template_probe (v text)`)
    await first.db.execute(sql`insert into template_probe values ('kept')`)
    await first.close()

    const second = await openDatabase({ dataDir })
    t.teardown(() => second.close())
    t.same(
      rowsOf(await second.db.execute(sql`select v from template_probe`)),
      [{ v: 'kept' }],
      'a restart finds the rows'
    )
  }
)
