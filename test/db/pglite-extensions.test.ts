import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { unpackedBundle } from '../../src/db/pglite-extensions.js'

t.test(
  'an unpacked bundle installs the extension without PGlite loading the bundle itself',
  { skip: embeddedPassOnly },
  async (t) => {
    const ext = unpackedBundle(pg_trgm)
    t.equal(ext.name, 'pg_trgm')
    const result = await ext.setup({} as never, { preRun: [] })
    t.equal(result.bundlePath, undefined, 'PGlite gets no bundle to stream in')
    t.equal(
      (result.emscriptenOpts as { preRun: unknown[] }).preRun.length,
      1,
      'one step writes the files before Postgres starts'
    )

    const installed: string[] = []
    const dirs = new Set<string>()
    ;(result.emscriptenOpts as { preRun: Array<(mod: unknown) => void> }).preRun[0]!({
      FS: {
        mkdirTree: (dir: string) => dirs.add(dir),
        writeFile: (path: string, data: Uint8Array) => installed.push(`${path}:${data.byteLength > 0}`)
      }
    })
    t.ok(installed.includes('/pglite/lib/postgresql/pg_trgm.so:true'), 'the shared library')
    t.ok(installed.includes('/pglite/share/postgresql/extension/pg_trgm.control:true'), 'the control file')
    t.ok(
      installed.some((f) => /pg_trgm--1\.3\.sql/.test(f)),
      'the install scripts'
    )
    t.ok(dirs.has('/pglite/lib/postgresql'))
  }
)

t.test(
  'PGlite with the unpacked pg_trgm: create extension, similarity, a trigram index, on disk and reopened',
  { skip: embeddedPassOnly },
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cairn-pglite-ext-'))
    t.teardown(() => rmSync(dir, { recursive: true, force: true }))
    const first = await PGlite.create(dir, { extensions: { pg_trgm: unpackedBundle(pg_trgm) } })
    await first.exec(
      "create extension pg_trgm; create table words (w text); insert into words values ('kubernetes'), ('terraform')"
    )
    await first.exec('create index words_trgm on words using gin (w gin_trgm_ops)')
    const near = await first.query<{ w: string }>('select w from words where w % $1 order by similarity(w, $1) desc', [
      'kuberntes'
    ])
    t.same(near.rows, [{ w: 'kubernetes' }])
    await first.close()

    const again = await PGlite.create(dir, { extensions: { pg_trgm: unpackedBundle(pg_trgm) } })
    t.teardown(() => again.close())
    const score = await again.query<{ s: number }>(
      "select word_similarity('terraf', w) as s from words where w = 'terraform'"
    )
    t.ok(score.rows[0]!.s > 0.5, 'the library loads again after a restart')
  }
)
