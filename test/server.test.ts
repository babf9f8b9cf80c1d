import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'

interface Started {
  url: string
  output: () => string
  exit: Promise<number | null>
  kill: (signal: NodeJS.Signals) => boolean
}

/** Runs src/server.ts as `npm start` would run the built file, on its own data dir. */
async function startServer(env: Record<string, string>): Promise<Started> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', DATABASE_URL: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const exit = once(child, 'exit').then(([code]) => code as number | null)
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setInterval(() => {
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
      if (match) {
        clearInterval(timer)
        resolve(match[1]!)
      }
    }, 50)
    void exit.then((code) => {
      clearInterval(timer)
      reject(new Error(`server exited with ${code}: ${output}`))
    })
  })
  return { url, output: () => output, exit, kill: (signal) => child.kill(signal) }
}

t.test('the server boots on embedded Postgres, serves, and shuts down cleanly on SIGTERM', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-server-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))

  const first = await startServer({ DATA_DIR: dataDir })
  const res = await fetch(`${first.url}/api/health?ready=1`)
  t.equal(res.status, 200)
  t.same(await res.json(), { status: 'ok' })
  const logLine = first.output().split('\n').find((line) => line.includes('"url":"/api/health?ready=1"'))
  t.ok(logLine, 'requests are logged as JSON')
  t.match(JSON.parse(logLine!), { reqId: /.+/, level: 30 }, 'with a request id')

  t.ok(first.kill('SIGTERM'))
  t.equal(await first.exit, 0, 'exits 0 after SIGTERM')
  t.match(first.output(), /shutting down/)

  // the embedded database was closed cleanly: a second boot on the same directory works
  const second = await startServer({ DATA_DIR: dataDir })
  t.equal((await fetch(`${second.url}/api/health?ready=1`)).status, 200)
  t.ok(second.kill('SIGINT'))
  t.equal(await second.exit, 0, 'exits 0 after SIGINT')
})

t.test('a bad configuration stops the process with the variable named', async (t) => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env: { ...process.env, PORT: 'eighty', ALLOW_DEV_ORG: 'perhaps' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const [code] = await once(child, 'exit')
  t.equal(code, 1)
  t.match(stderr, /PORT="eighty"/)
  t.match(stderr, /ALLOW_DEV_ORG="perhaps"/)
})

t.test('README quick start and CI agree with package.json', async (t) => {
  const readme = readFileSync('README.md', 'utf8')
  t.match(readme, /npm ci && npm start/)
  t.match(readme, /npm ci && npm test/)
  const pkg = JSON.parse(readFileSync('package.json', 'utf8'))
  t.match(pkg.scripts.start, /dist\/src\/server\.js/)
  t.equal(pkg.scripts.prestart, 'npm run build', 'npm start builds first on a fresh clone')
})
