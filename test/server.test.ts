import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { waitFor } from './helper.js'
import { messages, spawnServer, startServer } from './server-process.js'

t.test('the server boots on embedded Postgres, serves, and shuts down cleanly on SIGTERM', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-server-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))

  const first = await startServer({ DATA_DIR: dataDir })
  t.teardown(() => first.kill('SIGKILL'))
  const journal = JSON.parse(readFileSync('drizzle/meta/_journal.json', 'utf8')).entries.length
  const start = messages(first.output())
  t.ok(start.includes(`database: embedded PGlite in ${join(dataDir, 'pglite')}`), 'the start log names the database')
  t.ok(
    start.includes(`migrations: ${journal} applied, the schema is up to date (${journal} in all)`),
    'and the migrations applied'
  )
  t.ok(
    start.some((m) => /^dev org: on, for callers on this machine \(loopback\) only/.test(m)),
    'and the dev org, for whom'
  )
  t.ok(
    start.includes(`API at ${first.url}/api, docs at ${first.url}/docs, Memory Hub at ${first.url}/hub/`),
    'and where the API, docs and console are'
  )
  t.equal((await fetch(`${first.url}/docs`)).status, 200, 'docs are where it says')
  const res = await fetch(`${first.url}/api/health?ready=1`)
  t.equal(res.status, 200)
  t.same(await res.json(), { status: 'ok' })
  // the log line is written after the answer: wait for it rather than race it
  const logLine = await waitFor("the request's log line", async () =>
    first
      .output()
      .split('\n')
      .find((line) => line.includes('"url":"/api/health?ready=1"'))
  )
  t.match(
    JSON.parse(logLine),
    { reqId: /.+/, level: 30, msg: 'request', method: 'GET', status: 200, ms: Number },
    'requests are logged as JSON, with a request id'
  )
  t.equal(
    first
      .output()
      .split('\n')
      .filter((line) => line.includes('/api/health?ready=1')).length,
    1,
    'one line per request'
  )

  t.ok(first.kill('SIGTERM'))
  t.equal(await first.exit, 0, 'exits 0 after SIGTERM')
  t.match(first.output(), /shutting down/)

  // the embedded database was closed cleanly: a second boot on the same directory works
  // (with the log for people: one readable line per fact)
  const second = await startServer({ DATA_DIR: dataDir, ALLOW_DEV_ORG: 'false', LOG_FORMAT: 'pretty' })
  t.teardown(() => second.kill('SIGKILL'))
  t.equal((await fetch(`${second.url}/api/health?ready=1`)).status, 200)
  t.match(second.output(), `migrations: the schema is up to date (${journal} in all, none to apply)`)
  t.match(second.output(), /^\S+ INFO: dev org: off/m)
  const pretty = await waitFor("the request's pretty line", async () =>
    second
      .output()
      .split('\n')
      .find((line) => line.includes('/api/health?ready=1'))
  )
  t.match(pretty, /^\S+ INFO: request .*"method":"GET".*"status":200/, 'a request is one readable line')
  t.notOk(
    second
      .output()
      .split('\n')
      .some((line) => line.startsWith('{')),
    'no JSON lines'
  )
  t.ok(second.kill('SIGINT'))
  t.equal(await second.exit, 0, 'exits 0 after SIGINT')
})

t.test('a bad configuration stops the process with the variable named and the allowed values', async (t) => {
  const child = spawnServer({ PORT: 'eighty', ALLOW_DEV_ORG: 'perhaps', LOG_LEVEL: 'verbose', NODE_ENV: 'prod' })
  t.equal(await child.exit, 1)
  t.match(child.stderr(), /PORT="eighty": must be a whole number from 0 to 65535/)
  t.match(child.stderr(), /ALLOW_DEV_ORG="perhaps": must be true or false/)
  t.match(child.stderr(), /LOG_LEVEL="verbose": must be one of fatal, error, warn, info, debug, trace, silent/)
  t.match(child.stderr(), /NODE_ENV="prod": must be one of development, production, test/)
})

t.test('a database that refuses the connection, or does not exist, is one sentence and exit 1', async (t) => {
  const refused = spawnServer({ DATABASE_URL: 'postgres://cairn:s3cret@127.0.0.1:1/cairn' })
  t.equal(await refused.exit, 1)
  t.equal(
    refused.stderr(),
    'cairn: cannot reach the database: Postgres at 127.0.0.1:1/cairn refused the connection (is Postgres running there?)\n'
  )

  const server = process.env.DATABASE_URL
  if (!server) return
  const missing = new URL(server)
  missing.pathname = `/cairn_missing_${process.pid}`
  missing.password = 's3cret'
  const child = spawnServer({ DATABASE_URL: missing.toString() })
  t.equal(await child.exit, 1)
  t.equal(
    child.stderr(),
    `cairn: the database does not exist: Postgres at ${missing.hostname}:${missing.port || '5432'}/cairn_missing_${process.pid} (create it, or fix DATABASE_URL)\n`
  )
  t.notMatch(child.output(), /s3cret/, 'never the password')
})

t.test('README quick start and CI agree with package.json', async (t) => {
  const readme = readFileSync('README.md', 'utf8')
  t.match(readme, /npm ci && npm start/)
  t.match(readme, /npm ci && npm test/)
  const pkg = JSON.parse(readFileSync('package.json', 'utf8'))
  t.equal(pkg.scripts.start, 'node scripts/start.mjs', 'npm start builds only when the sources changed, then serves')
  t.equal(
    pkg.scripts.prepare,
    'node scripts/build.mjs && tap build',
    'npm ci builds the service and tap with the plugins .taprc names'
  )
  t.notOk(pkg.scripts.prestart, 'no rebuild on every start')
})
