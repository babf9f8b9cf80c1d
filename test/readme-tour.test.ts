import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { embeddedPassOnly } from './passes.js'
import { startServer } from './server-process.js'

const run = promisify(execFile)

/** The README's tour, as a reader would paste it: its one shell block. */
function tour(): string {
  const readme = readFileSync('README.md', 'utf8')
  const section = readme.slice(readme.indexOf('## A five-minute tour'))
  const block = /```sh\n([\s\S]*?)```/.exec(section)
  if (!block) throw new Error('the README has no tour')
  return block[1]!
}

t.test("the README's tour runs as written against a fresh server", { skip: embeddedPassOnly }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-tour-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const server = await startServer({ DATA_DIR: dataDir, SANDBOX_PROVIDER: 'none' })
  t.teardown(async () => {
    server.kill('SIGTERM')
    await server.exit
  })
  const port = new URL(server.url).port
  const script = tour().replaceAll('localhost:3000', `localhost:${port}`)
  const { stdout } = await run('bash', ['-euo', 'pipefail', '-c', script], { timeout: 60_000 })
  t.match(stdout, /^\{"status":"ok"\}/, 'health')
  t.match(stdout, /"status":"succeeded"[^\n]*"output":"My name is Priya\."/, 'the first run answered')
  t.match(stdout, /"output":"history: 1 turns: My name is Priya\."/, 'the second run saw the first')
  t.match(stdout, /event: message\.delta[\s\S]*event: run\.succeeded[\s\S]*event: end/, 'the event stream, to its end')
  t.match(stdout, /"items":\[\{[^\n]*"title":"Deploys"/, 'the search found the record despite the typo')
  t.match(stdout, /"runs":\{"total":2/, 'the dashboard counts both runs')
  t.notMatch(stdout, /"error":"/, 'no command was refused')
})
