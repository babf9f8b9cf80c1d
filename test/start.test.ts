import { lstatSync, mkdtempSync, readlinkSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedPassOnly } from './passes.js'
import { sourceHash } from '../scripts/build.mjs'
import { startServer } from './server-process.js'

// `npm start` is `node scripts/start.mjs`: in CI `npm ci` built the sources already
// (prepare), so both starts only hash them; after a source change the first to take
// the build lock builds and the other waits for it.
t.test(
  'two starts at once in one checkout both come up (own DATA_DIRs), from the same atomic build',
  { skip: embeddedPassOnly },
  async (t) => {
    const dirs = [0, 1].map(() => mkdtempSync(join(tmpdir(), 'cairn-start-')))
    t.teardown(() => {
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
    })
    const servers = await Promise.all(dirs.map((dir) => startServer({ DATA_DIR: dir }, ['scripts/start.mjs'])))
    for (const server of servers) t.teardown(() => server.kill('SIGKILL'))
    for (const server of servers) {
      t.equal((await fetch(`${server.url}/api/health`)).status, 200, `${server.url} answers`)
      t.notMatch(server.output(), /Error|at .*\.js:\d+/, 'no crash, no stack')
    }
    t.ok(lstatSync('dist').isSymbolicLink(), 'dist is a symlink')
    t.equal(readlinkSync('dist'), join('.build', sourceHash()), 'to the build of the current sources')
    for (const server of servers) {
      t.ok(server.kill('SIGTERM'))
      t.equal(await server.exit, 0)
    }
  }
)
