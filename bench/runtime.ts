// The runtime's HTTP routes against a bare Node http server; the cost of one sandbox
// command (bubblewrap, plain) against a bare spawn of /bin/true; and the file tools
// against a `shell` call of the same sandbox, same run.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { probeBubblewrap } from '../src/runtime/bubblewrap.js'
import { LocalSandboxProvider } from '../src/runtime/local-sandbox.js'
import type { Sandbox } from '../src/runtime/sandbox.js'
import { load, startServer, table, type Result } from './lib.js'

const RUN = '0190b8f0-0000-7000-8000-00000000be01'

async function httpRoutes(): Promise<string> {
  const rows: Result[] = []
  const bare = await startServer('bench/bare-server.ts')
  try {
    rows.push(await load({ url: `${bare.url}/api/health`, name: 'bare node http (baseline)' }))
  } finally {
    await bare.stop()
  }
  const cairn = await startServer('bench/runtime-server.ts')
  try {
    rows.push(await load({ url: `${cairn.url}/api/tools/policies`, name: 'GET /api/tools/policies' }))
    rows.push(await load({ url: `${cairn.url}/api/runs/${RUN}/approvals`, name: 'GET /api/runs/:id/approvals' }))
  } finally {
    await cairn.stop()
  }
  return table(rows, rows[0]!)
}

async function timeMany(n: number, once: () => Promise<unknown>): Promise<number> {
  await once()
  const started = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await once()
  return Number(process.hrtime.bigint() - started) / 1e6 / n
}

async function sandboxExec(): Promise<string> {
  const n = Number(process.env.BENCH_EXECS ?? 200)
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-sandbox-'))
  const log = { warn() {}, info() {} }
  const options = {
    dataDir,
    network: false,
    execTimeoutMs: 10_000,
    outputMaxBytes: 65_536,
    fileMaxBytes: 1_048_576,
    log
  }
  try {
    const rows: Array<[string, number]> = []
    rows.push([
      'spawn /bin/true (baseline)',
      await timeMany(n, () => new Promise((resolve) => spawn('/bin/true').once('close', resolve)))
    ])
    const files: Array<[string, number, number]> = []
    const both = async (mode: string, sandbox: Sandbox) => {
      const shell = await timeMany(n, () => sandbox.exec('true'))
      rows.push([`sandbox exec \`true\`, ${mode}`, shell])
      await sandbox.writeFile('notes/page.md', 'x'.repeat(4096))
      for (const [tool, call] of [
        ['read_file (4 KB)', () => sandbox.readFile('notes/page.md')],
        ['list_files', () => sandbox.listFiles('notes')],
        ['write_file (4 KB)', () => sandbox.writeFile('notes/page.md', 'y'.repeat(4096))]
      ] as const) {
        files.push([`${tool}, ${mode}`, await timeMany(n, call), shell])
      }
    }
    await both(
      'plain process',
      await new LocalSandboxProvider({ ...options, confinement: 'none', unconfined: true }).create({
        orgId: 'bench',
        threadId: 'plain'
      })
    )
    if (probeBubblewrap().ok) {
      const boxed = new LocalSandboxProvider({ ...options, confinement: 'bwrap', unconfined: false })
      await both('bubblewrap', await boxed.create({ orgId: 'bench', threadId: 'bwrap' }))
    }
    const base = rows[0]![1]
    return [
      '| case | ms per command | ratio to baseline |',
      '| --- | ---: | ---: |',
      ...rows.map(([name, ms]) => `| ${name} | ${ms.toFixed(2)} | ${(ms / base).toFixed(2)} |`),
      '',
      '| file tool | ms per call | ratio to a shell call (`true`) in the same sandbox |',
      '| --- | ---: | ---: |',
      ...files.map(([name, ms, shell]) => `| ${name} | ${ms.toFixed(2)} | ${(ms / shell).toFixed(2)} |`)
    ].join('\n')
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
  }
}

export async function benchRuntime(): Promise<string> {
  if (process.env.BENCH_RUNTIME_PARTS === 'sandbox') return sandboxExec()
  return `${await httpRoutes()}\n\n${await sandboxExec()}`
}
