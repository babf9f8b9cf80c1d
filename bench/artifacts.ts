// Serving artifact content next to @fastify/static serving the same file from disk
// and next to the health route, and a 200 MB upload's time and the server's peak RSS growth.
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { benchPostgres, interleaved, startServer, table, withDatabase } from './lib.js'

const MB = 1024 * 1024

async function uploadFile(url: string, name: string, bytes: Buffer): Promise<string> {
  const form = new FormData()
  form.append('file', new Blob([bytes]), name)
  const res = await fetch(`${url}/api/uploads`, { method: 'POST', body: form })
  if (res.status !== 201) throw new Error(`upload: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { upload: { id: string } }).upload.id
}

async function artifactOf(url: string, body: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${url}/api/artifacts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body)
  })
  if (res.status !== 201) throw new Error(`artifact: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { artifact: { id: string } }).artifact.id
}

/** The resident set of a process, from /proc (Linux), in bytes. */
function rssOf(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'))
  return Number(/(\d+)/.exec(line ?? '')?.[1] ?? 0) * 1024
}

/** Streams a `size`-byte multipart upload in 1 MB chunks; resolves with the status once answered. */
function streamUpload(url: string, size: number): Promise<number> {
  const boundary = 'benchboundary'
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`
  )
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`)
  const chunk = randomBytes(MB)
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/api/uploads`,
      {
        method: 'POST',
        headers: {
          'content-type': `multipart/form-data; boundary=${boundary}`,
          'content-length': String(head.length + size + tail.length)
        }
      },
      (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      }
    )
    req.on('error', reject)
    req.write(head)
    let sent = 0
    const pump = () => {
      while (sent < size) {
        const piece = chunk.subarray(0, Math.min(MB, size - sent))
        sent += piece.length
        if (!req.write(piece)) return void req.once('drain', pump)
      }
      req.end(tail)
    }
    pump()
  })
}

export async function benchArtifacts(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-static-'))
  const big = randomBytes(10 * MB)
  writeFileSync(join(dir, 'big.bin'), big)
  const cairn = await startServer('bench/cairn-server.ts', {
    UPLOAD_MAX_BYTES: String(300 * MB),
    REQUEST_TIMEOUT_MS: '600000'
  })
  const fastifyStatic = await startServer('bench/static-server.ts', { STATIC_ROOT: dir })
  try {
    const bigId = await artifactOf(cairn.url, {
      name: 'big.bin',
      uploadId: await uploadFile(cairn.url, 'big.bin', big)
    })
    const smallId = await artifactOf(cairn.url, { name: 'small.txt', content: 'x'.repeat(4096) })
    const connections = Number(process.env.BENCH_CONNECTIONS_LARGE ?? 10)
    const large = await interleaved([
      { name: '@fastify/static, 10 MB file (baseline)', url: `${fastifyStatic.url}/big.bin`, connections },
      { name: 'GET /api/artifacts/:id/content, 10 MB', url: `${cairn.url}/api/artifacts/${bigId}/content`, connections }
    ])
    const small = await interleaved([
      { name: 'GET /api/health (baseline)', url: `${cairn.url}/api/health` },
      { name: 'GET /api/artifacts/:id/content, 4 KB', url: `${cairn.url}/api/artifacts/${smallId}/content` }
    ])
    const throughput = (r: { rps: number }) => `${((r.rps * 10 * MB) / MB).toFixed(0)} MB/s`
    // the same 4 KB case on real Postgres (BENCH_DATABASE_URL or DATABASE_URL), when there is one
    const onPostgres = benchPostgres
      ? await withDatabase(benchPostgres, async (databaseUrl) => {
          const pg = await startServer('bench/cairn-server.ts', { DATABASE_URL: databaseUrl })
          try {
            const id = await artifactOf(pg.url, { name: 'small.txt', content: 'x'.repeat(4096) })
            const rows = await interleaved([
              { name: 'GET /api/health (baseline), Postgres', url: `${pg.url}/api/health` },
              { name: 'GET /api/artifacts/:id/content, 4 KB, Postgres', url: `${pg.url}/api/artifacts/${id}/content` }
            ])
            return ['', table(rows, rows[0]!)].join('\n')
          } finally {
            await pg.stop()
          }
        })
      : ''

    // 200 MB upload: time and the server's peak resident set above its idle size
    const pid = cairn.process.pid!
    global.gc?.()
    const before = rssOf(pid)
    let peak = before
    const sampler = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 20)
    const started = performance.now()
    const status = await streamUpload(cairn.url, 200 * MB)
    const seconds = (performance.now() - started) / 1000
    clearInterval(sampler)
    peak = Math.max(peak, rssOf(pid))
    return [
      '### Serving 10 MB (10 connections)',
      '',
      table(large, large[0]!),
      '',
      `Throughput: @fastify/static ${throughput(large[0]!)}, Cairn ${throughput(large[1]!)}.`,
      '',
      '### Serving 4 KB (PGlite, then Postgres when given)',
      '',
      table(small, small[0]!),
      onPostgres,
      '',
      '### Uploading 200 MB (multipart, streamed)',
      '',
      `status ${status}; ${seconds.toFixed(2)} s (${(200 / seconds).toFixed(0)} MB/s); server RSS ${(before / MB).toFixed(0)} MB idle, peak ${(peak / MB).toFixed(0)} MB: growth ${((peak - before) / MB).toFixed(1)} MB`
    ].join('\n')
  } finally {
    await cairn.stop()
    await fastifyStatic.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}
