// The runtime's HTTP routes against a bare Node http server; the cost of one sandbox
// command (bubblewrap, plain) against a bare spawn of /bin/true; and the file tools
// against a `shell` call of the same sandbox, same run; and a thread's desktop from its
// start to its first full frame through the desktop proxy.
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { probeBubblewrap } from '../src/runtime/bubblewrap.js'
import { LocalSandboxProvider } from '../src/runtime/local-sandbox.js'
import type { Sandbox } from '../src/runtime/sandbox.js'
import WebSocket from 'ws'
import { newId } from '../src/db/ids.js'
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

/** An RFB (VNC) client over the proxy's WebSocket: resolves once the first full frame has arrived. */
function firstFrame(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['binary'])
    let buffered = Buffer.alloc(0)
    let step = 0
    let bytesPerPixel = 4
    let rects = -1
    ws.on('error', reject)
    ws.on('close', (code, reason) => reject(new Error(`closed: ${code} ${reason.toString()}`)))
    const take = (n: number): Buffer | null => {
      if (buffered.length < n) return null
      const out = buffered.subarray(0, n)
      buffered = buffered.subarray(n)
      return out
    }
    ws.on('message', (data: Buffer) => {
      buffered = Buffer.concat([buffered, data])
      for (;;) {
        if (step === 0) {
          if (!take(12)) return
          ws.send(Buffer.from('RFB 003.008\n', 'latin1'))
          step = 1
        } else if (step === 1) {
          const count = buffered[0]
          if (count === undefined || !take(1 + count)) return
          ws.send(Buffer.from([1]))
          step = 2
        } else if (step === 2) {
          if (!take(4)) return
          ws.send(Buffer.from([1]))
          step = 3
        } else if (step === 3) {
          if (buffered.length < 24) return
          const nameLength = buffered.readUInt32BE(20)
          const init = take(24 + nameLength)
          if (!init) return
          bytesPerPixel = init[4]! / 8
          const width = init.readUInt16BE(0)
          const height = init.readUInt16BE(2)
          // the whole screen, raw encoding (the only one a client that sent no SetEncodings gets)
          const request = Buffer.alloc(10)
          request.writeUInt8(3, 0)
          request.writeUInt16BE(width, 6)
          request.writeUInt16BE(height, 8)
          ws.send(request)
          step = 4
        } else if (step === 4) {
          const header = take(4)
          if (!header) return
          if (header[0] !== 0) return reject(new Error(`unexpected server message ${header[0]}`))
          rects = header.readUInt16BE(2)
          step = 5
        } else {
          if (rects === 0) {
            ws.removeAllListeners('close')
            ws.close()
            return resolve()
          }
          if (buffered.length < 12) return
          const w = buffered.readUInt16BE(4)
          const h = buffered.readUInt16BE(6)
          if (!take(12 + w * h * bytesPerPixel)) return
          rects--
        }
      }
    })
  })
}

/** From a new thread's desktop request to its first full frame, through the proxy: each thread its own desktop. */
async function desktopFirstFrame(): Promise<string> {
  const n = Number(process.env.BENCH_DESKTOPS ?? 8)
  const cairn = await startServer('bench/runtime-server.ts')
  try {
    const base = cairn.url.replace(/^http/, 'ws')
    const times: number[] = []
    // one first, not timed: the service's first WebSocket and sandbox
    await firstFrame(`${base}/api/desktop-proxy/${newId()}/websockify`)
    for (let i = 0; i < n; i++) {
      const started = process.hrtime.bigint()
      await firstFrame(`${base}/api/desktop-proxy/${newId()}/websockify`)
      times.push(Number(process.hrtime.bigint() - started) / 1e6)
    }
    times.sort((a, b) => a - b)
    const median = times[Math.floor(times.length / 2)]!
    return [
      '| case | median ms | min ms | max ms |',
      '| --- | ---: | ---: | ---: |',
      `| desktop start to first frame (${n} threads) | ${median.toFixed(1)} | ${times[0]!.toFixed(1)} | ${times.at(-1)!.toFixed(1)} |`
    ].join('\n')
  } finally {
    await cairn.stop()
  }
}

export async function benchRuntime(): Promise<string> {
  const parts = process.env.BENCH_RUNTIME_PARTS
  if (parts === 'sandbox') return sandboxExec()
  if (parts === 'desktop') return desktopFirstFrame()
  return `${await httpRoutes()}\n\n${await sandboxExec()}\n\n${await desktopFirstFrame()}`
}
