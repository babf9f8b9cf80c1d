// npx tsx bench/start-time.ts [runs]: seconds from `npm start` to the first 200 on
// /api/health, each start on a fresh temp DATA_DIR and a free port (embedded PGlite).
// Run it in a checkout after `npm ci`; the first start after a source change includes
// the build, the others do not.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  return port
}

async function startOnce(): Promise<number> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-start-'))
  const port = await freePort()
  const started = performance.now()
  const child = spawn('npm', ['start'], {
    env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: '', LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'inherit'],
    detached: true
  })
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`npm start exited with ${child.exitCode}`)
      const ok = await fetch(`http://127.0.0.1:${port}/api/health`).then((r) => r.status === 200, () => false)
      if (ok) return (performance.now() - started) / 1000
      if (performance.now() - started > 300_000) throw new Error('no answer within 300 s')
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  } finally {
    // npm runs the server as its child: signal the whole group
    if (child.exitCode === null) {
      process.kill(-child.pid!, 'SIGTERM')
      await once(child, 'exit')
    }
    rmSync(dataDir, { recursive: true, force: true })
  }
}

const runs = Number(process.argv[2] ?? 3)
const times: number[] = []
for (let i = 0; i < runs; i++) {
  times.push(await startOnce())
  process.stdout.write(`start ${i + 1}: ${times.at(-1)!.toFixed(2)} s to the first 200 on /api/health\n`)
}
