import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { spawnServer, startServer } from '../server-process.js'

// One process per embedded data directory, with real processes: the server started twice on one,
// as `npm start` runs it (the build is current after `npm ci`; otherwise the first start builds)
const start = ['scripts/start.mjs']
t.test(
  'one process per DATA_DIR: a second stops at once naming the holder; a killed holder does not block a restart',
  { skip: embeddedPassOnly },
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-server-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    const first = await startServer({ DATA_DIR: dataDir }, start)
    t.teardown(() => first.kill('SIGKILL'))

    const second = spawnServer({ DATA_DIR: dataDir }, start)
    t.equal(await second.exit, 1, 'the second exits 1')
    t.equal(
      second.stderr(),
      `cairn: data directory ${dataDir} is in use by another Cairn process (pid ${first.pid}); ` +
        'stop it first, or give this one its own DATA_DIR (or DATABASE_URL)\n',
      'one sentence naming the directory and the holder'
    )
    t.notMatch(second.output(), /database:|migrations:/, 'it opened nothing')
    t.equal((await fetch(`${first.url}/api/health?ready=1`)).status, 200, 'the first serves on')

    t.ok(first.kill('SIGKILL'))
    await first.exit
    const third = await startServer({ DATA_DIR: dataDir }, start)
    t.equal(
      (await fetch(`${third.url}/api/health?ready=1`)).status,
      200,
      'a lock left by kill -9 does not block the restart'
    )
    t.ok(third.kill('SIGTERM'))
    t.equal(await third.exit, 0)
  }
)
