import { once } from 'node:events'
import { connect, type Socket } from 'node:net'
import t from 'tap'
import { embeddedOnly } from '../passes.js'
import type { SseStream } from '../../plugins/sse.js'
import { buildTestApp } from '../helper.js'
import { eventually, SseClient } from '../runs/sse-client.js'

async function listening(app: Awaited<ReturnType<typeof buildTestApp>>): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
}

t.test('a reader that stops reading is dropped after SSE_STALL_MS, one that reads is kept', embeddedOnly, async (t) => {
  const opened: Array<{ stream: SseStream; socket: Socket }> = []
  const app = await buildTestApp(t, {
    // the buffer limit far away: only the stall check can drop the stream
    env: { RUN_WORKER_CONCURRENCY: '0', SSE_MAX_BUFFER_BYTES: String(64 * 1024 * 1024), SSE_STALL_MS: '300' },
    apiPlugins: [
      async (scope) => {
        scope.get('/test/sse', { config: { scope: 'public' } }, async (request, reply) => {
          opened.push({ stream: scope.sse.open(request, reply), socket: request.raw.socket })
        })
      }
    ]
  })
  const base = new URL(await listening(app))
  const stalled = connect(Number(base.port), base.hostname)
  stalled.on('error', () => {})
  t.teardown(() => stalled.destroy())
  await once(stalled, 'connect')
  stalled.pause()
  stalled.write(`GET /api/test/sse HTTP/1.1\r\nHost: ${base.host}\r\nAccept: text/event-stream\r\n\r\n`)
  const { stream, socket } = await eventually(async () => opened[0])
  const reader = await SseClient.open(`${base.origin}/api/test/sse`)
  t.teardown(() => reader.close())
  const kept = (await eventually(async () => opened[1])).stream

  // the kernel takes frames until its buffers are full; count what it pins
  const frame = `data: ${'x'.repeat(16 * 1024)}\n\n`
  let accepted = 0
  while (socket.writableLength === 0 && accepted < 256 * 1024 * 1024) {
    if (!stream.write(frame)) break
    kept.write(frame)
    accepted += frame.length
    if (accepted % (64 * frame.length) === 0) await new Promise((resolve) => setImmediate(resolve))
  }
  t.ok(socket.writableLength > 0, "the stalled reader's kernel buffers filled")
  t.comment(`the kernel held about ${(accepted / 1024 / 1024).toFixed(1)} MB for the stalled reader before Node had to`)
  const closed = new Promise<void>((resolve) => stream.onClose(resolve))
  // the heartbeats keep writing; the stall check, not the buffer limit, ends it
  await closed
  t.ok(socket.writableLength < 64 * 1024 * 1024, 'dropped below the buffer limit')
  t.notOk(kept.closed, 'the reader that reads is kept')
  await reader.until((c) => c.frames.length >= accepted / frame.length, 30_000)
  t.equal(app.sse.count, 1)
  await eventually(async () => stalled.destroyed || stalled.readableEnded || socket.destroyed)
  t.pass('the stalled connection is closed')
})
