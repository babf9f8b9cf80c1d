// npx tsx bench/start-time.ts [rounds]: seconds from `npm start` to the first 200 on
// /api/health (embedded PGlite, a free port), in three interleaved cases so that machine
// load hits them alike:
//   fresh    `npm start` on a new DATA_DIR (a first start: the database is created)
//   restart  `npm start` again on that DATA_DIR
//   rebuild  what `npm start` did before it ran from source (prestart: a full tsc build, then the
//            server) on a new DATA_DIR, for comparison
// Run it in a checkout after `npm ci` (the build is current, so npm start only hashes).
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

const OLD_START =
  'npx tsc -p tsconfig.build.json --outDir .build/bench-rebuild && node .build/bench-rebuild/src/server.js'

async function timeStart(dataDir: string, command: string[]): Promise<number> {
  const port = await freePort()
  const started = performance.now()
  const child = spawn(command[0]!, command.slice(1), {
    env: {
      ...process.env,
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: '',
      LOG_LEVEL: 'warn'
    },
    stdio: ['ignore', 'ignore', 'ignore'],
    detached: true
  })
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${command.join(' ')} exited with ${child.exitCode}`)
      const ok = await fetch(`http://127.0.0.1:${port}/api/health`).then(
        (r) => r.status === 200,
        () => false
      )
      if (ok) return (performance.now() - started) / 1000
      if (performance.now() - started > 600_000) throw new Error('no answer within 600 s')
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  } finally {
    // npm runs the server as its child: signal the whole group
    if (child.exitCode === null) {
      process.kill(-child.pid!, 'SIGTERM')
      await once(child, 'exit')
    }
  }
}

const rounds = Number(process.argv[2] ?? 3)
const results: Record<string, number[]> = { fresh: [], restart: [], rebuild: [] }
for (let i = 0; i < rounds; i++) {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-start-'))
  const oldDir = mkdtempSync(join(tmpdir(), 'cairn-start-'))
  try {
    results.fresh!.push(await timeStart(dataDir, ['npm', 'start']))
    results.restart!.push(await timeStart(dataDir, ['npm', 'start']))
    results.rebuild!.push(await timeStart(oldDir, ['sh', '-c', OLD_START]))
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
    rmSync(oldDir, { recursive: true, force: true })
    rmSync('.build/bench-rebuild', { recursive: true, force: true })
  }
  process.stdout.write(
    `round ${i + 1}: ${Object.entries(results)
      .map(([k, v]) => `${k} ${v.at(-1)!.toFixed(1)} s`)
      .join(', ')}\n`
  )
}
const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!
process.stdout.write(
  `median: ${Object.entries(results)
    .map(([k, v]) => `${k} ${median(v).toFixed(1)} s`)
    .join(', ')}\n`
)
