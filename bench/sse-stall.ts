// npx tsx bench/sse-stall.ts: a real client that stops reading an SSE stream that keeps
// writing (16 KB frames every 100 ms, about 160 KB/s, until the kernel's buffers are full,
// then every second): how many bytes the kernel takes for it before Node has to hold any,
// and how long after that the service drops it, with the SSE_STALL_MS and
// SSE_MAX_BUFFER_BYTES of the environment (defaults: 30 s, 1 MB). At 16 KB/s the 1 MB
// limit takes about 64 s to fill, so the stall limit is what drops it; SSE_STALL_MS=600000
// shows the service without it.
import { once } from 'node:events'
import { connect, type Socket } from 'node:net'
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'
import type { SseStream } from '../plugins/sse.js'

const config = loadConfig({
  ...process.env,
  LOG_LEVEL: 'silent',
  DATABASE_URL: '',
  DATA_DIR: 'memory://',
  RUN_WORKER_CONCURRENCY: '0'
})
let opened: { stream: SseStream; socket: Socket } | null = null
const app = await buildApp({
  config,
  apiPlugins: [
    async (scope) => {
      scope.get('/bench/sse', { config: { scope: 'public' } }, async (request, reply) => {
        opened = { stream: scope.sse.open(request, reply), socket: request.raw.socket }
      })
    }
  ]
})
await app.listen({ port: 0, host: '127.0.0.1' })
const port = (app.server.address() as { port: number }).port
const client = connect(port, '127.0.0.1')
client.on('error', () => {})
await once(client, 'connect')
client.pause() // reads nothing, ever
client.write(`GET /api/bench/sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
while (!opened) await new Promise((resolve) => setTimeout(resolve, 10))
const { stream, socket } = opened as { stream: SseStream; socket: Socket }
const stoppedAt = performance.now()
let queuedAt: number | null = null
let kernelBytes = 0
const frame = `data: ${'x'.repeat(16 * 1024)}\n\n`
let tick = 0
const timer = setInterval(() => {
  if (socket.writableLength === 0) kernelBytes += frame.length
  else queuedAt ??= performance.now()
  if (queuedAt === null || tick++ % 10 === 0) stream.write(frame)
}, 100)
await new Promise<void>((resolve) => stream.onClose(resolve))
clearInterval(timer)
const now = performance.now()
process.stdout.write(
  `kernel took ${(kernelBytes / 1024 / 1024).toFixed(1)} MB before Node held a byte (${((queuedAt! - stoppedAt) / 1000).toFixed(1)} s at 160 KB/s, then 16 KB/s)\n`
)
process.stdout.write(
  `dropped ${((now - stoppedAt) / 1000).toFixed(1)} s after the client stopped reading, ${((now - queuedAt!) / 1000).toFixed(1)} s after Node began holding bytes; ${(socket.writableLength / 1024).toFixed(0)} KB were waiting in Node\n`
)
client.destroy()
await app.close()
