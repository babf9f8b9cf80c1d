import { eq } from 'drizzle-orm'
import t from 'tap'
import { organizations } from '../../src/auth/tables.js'
import { newId } from '../../src/db/ids.js'
import { announceQueued, createRun } from '../../src/runs/runs-repo.js'
import { runEvents } from '../../src/runs/tables.js'
import { once } from 'node:events'
import { connect } from 'node:net'
import type { SseStream } from '../../plugins/sse.js'
import { buildRunsApp } from './group.js'
import { eventually, SseClient } from './sse-client.js'

type App = Awaited<ReturnType<typeof buildRunsApp>>

async function listening(app: App): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
}
const createRunVia = async (app: App, payload: Record<string, unknown>) =>
  (await app.inject({ method: 'POST', url: '/api/runs', payload })).json().run as { id: string; rootRunId: string }

const words = (n: number, tag = 'w') => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ')

t.test('/api/runs/:id/events: headers, full history, live, then end', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_POLL_MS: '50', ECHO_WORD_DELAY_MS: '20' } })
  const base = await listening(app)
  const run = await createRunVia(app, { prompt: words(10) })
  const client = await SseClient.open(`${base}/api/runs/${run.id}/events`)
  t.teardown(() => client.close())
  t.equal(client.status, 200)
  t.match(client.headers['content-type'], /^text\/event-stream/)
  t.equal(client.headers['cache-control'], 'no-cache')
  t.equal(client.headers['x-accel-buffering'], 'no')
  t.ok(client.headers['x-service-release-fingerprint'], 'release headers on streams too')
  await client.until((c) => c.ended, 20_000)
  const types = client.frames.map((f) => f.event)
  t.equal(types[0], 'run.queued', 'history from the first event')
  t.same(types.slice(-2), ['run.succeeded', 'end'])
  t.equal(client.frames.filter((f) => f.event === 'message.delta').length, 10)
  const ids = client.frames.filter((f) => f.id).map((f) => Number(f.id))
  t.same(
    ids,
    [...ids].sort((a, b) => a - b),
    'ids increase'
  )
  const stored = await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(runEvents.id)
  t.same(
    ids,
    stored.map((e) => e.id),
    'exactly the stored events, in order'
  )
  const delta = client.json(client.frames.find((f) => f.event === 'message.delta')!)
  t.match(delta, { runId: run.id, rootRunId: run.id, type: 'message.delta', data: { text: 'w0' } })

  // a finished run: history then end at once; resumed after its end: just end
  const again = await SseClient.open(`${base}/api/runs/${run.id}/events`)
  await again.until((c) => c.ended)
  t.same(
    again.frames.map((f) => f.id),
    client.frames.map((f) => f.id)
  )
  // resumed after its terminal event: 204, so an EventSource stops reconnecting
  for (const lastEventId of [ids.at(-1)!, ids.at(-1)! + 1000]) {
    const done = await fetch(`${base}/api/runs/${run.id}/events`, {
      headers: { accept: 'text/event-stream', 'last-event-id': String(lastEventId) }
    })
    t.equal(
      done.status,
      204,
      `Last-Event-ID ${lastEventId === ids.at(-1) ? 'of the last event' : 'past the last event'}: 204`
    )
    t.equal(await done.text(), '', 'no body')
    t.equal(done.headers.get('x-service-release-fingerprint'), 'run-events-v1:dev', 'release headers set')
    t.equal(done.headers.get('x-service-api-compat'), 'run-events-v1')
  }
  // resumed before its end: the rest, then end
  const rest = await SseClient.open(`${base}/api/runs/${run.id}/events`, {
    headers: { 'last-event-id': String(ids.at(-2)) }
  })
  await rest.until((c) => c.ended)
  t.equal(rest.status, 200)
  t.same(
    rest.frames.map((f) => f.event),
    ['run.succeeded', 'end']
  )

  const bad = await SseClient.open(`${base}/api/runs/${run.id}/events`, { headers: { 'last-event-id': 'abc' } })
  await bad.until((c) => c.ended)
  t.equal(bad.status, 400)
})

t.test('resume with Last-Event-ID: exactly the rest, nothing twice', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_POLL_MS: '50', ECHO_WORD_DELAY_MS: '30' } })
  const base = await listening(app)
  const run = await createRunVia(app, { prompt: words(30) })
  const first = await SseClient.open(`${base}/api/runs/${run.id}/events`)
  await first.until((c) => c.events('message.delta').length >= 5)
  first.close()
  const seen = first.frames.filter((f) => f.id)
  const last = seen.at(-1)!.id!
  const second = await SseClient.open(`${base}/api/runs/${run.id}/events`, { headers: { 'last-event-id': last } })
  await second.until((c) => c.ended, 20_000)
  const all = [...seen, ...second.frames.filter((f) => f.id)].map((f) => Number(f.id))
  const stored = (await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(runEvents.id)).map(
    (e) => e.id
  )
  t.same(all, stored, 'first part + resumed part = every stored event, once each, in order')
  t.ok(Number(second.frames[0]!.id) > Number(last))
})

t.test('thread stream: every run interleaved; resume while a second run runs', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_POLL_MS: '50', ECHO_WORD_DELAY_MS: '30' } })
  const base = await listening(app)
  const root = await createRunVia(app, { prompt: words(3, 'a') })
  await eventually(
    async () => (await app.inject({ method: 'GET', url: `/api/runs/${root.id}` })).json().run.status === 'succeeded'
  )
  const stream = await SseClient.open(`${base}/api/runs/${root.id}/thread-events`)
  await stream.until((c) => c.events('run.succeeded').length === 1, 20_000)
  const second = await createRunVia(app, { prompt: words(25, 'b'), rootRunId: root.id })
  await stream.until(
    (c) => c.frames.filter((f) => f.event === 'message.delta' && c.json(f).runId === second.id).length >= 4,
    20_000
  )
  stream.close()
  const lastId = stream.lastId()!
  const resumed = await SseClient.open(`${base}/api/runs/${root.id}/thread-events`, {
    headers: { 'last-event-id': lastId }
  })
  t.teardown(() => resumed.close())
  await resumed.until((c) => c.events('run.succeeded').length === 1, 20_000)
  const got = [...stream.frames, ...resumed.frames].map((f) => Number(f.id))
  const stored = (
    await app.db.select().from(runEvents).where(eq(runEvents.rootRunId, root.id)).orderBy(runEvents.id)
  ).map((e) => e.id)
  t.same(got, stored, 'both runs, every event once, in order')
  t.same(new Set(resumed.frames.map((f) => resumed.json(f).runId)), new Set([second.id]))
  t.equal((await SseClient.open(`${base}/api/runs/${newId()}/thread-events`)).status, 404)
})

t.test('changes stream: identifiers only, live, org-scoped, resumable', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0', SSE_HEARTBEAT_MS: '100' } })
  const base = await listening(app)
  const before = await createRunVia(app, { prompt: 'before' })
  // run.queued is stored just after the run commits; let it land before subscribing
  await eventually(async () => (await app.db.select().from(runEvents).where(eq(runEvents.runId, before.id))).length > 0)
  const changes = await SseClient.open(`${base}/api/runs/changes`)
  t.teardown(() => changes.close())
  const otherOrg = { id: newId(), name: 'Other', slug: 'other' }
  await app.db.insert(organizations).values(otherOrg)
  const foreign = await app.db.transaction((tx) =>
    createRun(
      tx,
      { kind: 'dev', orgId: otherOrg.id, userId: null, role: 'owner' },
      { prompt: 'secret', engine: 'echo', model: 'echo', origin: 'api' }
    )
  )
  await announceQueued(app.runs.events, foreign!) // its event is stored and NOTIFYed, in the other org
  const run = await createRunVia(app, { prompt: 'hello' })
  await changes.until((c) => c.events('change').length >= 1)
  await app.inject({ method: 'POST', url: `/api/runs/${run.id}/cancel` })
  await changes.until((c) => c.events('change').length >= 2)
  await changes.until((c) => c.comments.includes('hb'))
  const frames = changes.events('change')
  t.same(
    frames.map((f) => changes.json(f)),
    [
      { kind: 'run', id: run.id, rootRunId: run.id },
      { kind: 'run', id: run.id, rootRunId: run.id }
    ],
    'starts live (nothing about the earlier run), identifiers only, nothing from the other org'
  )
  t.notOk(frames.some((f) => f.data.includes(before.id)))

  const resumed = await SseClient.open(`${base}/api/runs/changes`, { headers: { 'last-event-id': frames[0]!.id! } })
  t.teardown(() => resumed.close())
  await resumed.until((c) => c.events('change').length >= 1)
  t.equal(resumed.frames[0]!.id, frames[1]!.id, 'resumes right after the given id')
})

t.test('a client that does not read is dropped', async (t) => {
  let stream: SseStream | null = null
  const app = await buildRunsApp(t, {
    env: { RUN_WORKER_CONCURRENCY: '0', SSE_MAX_BUFFER_BYTES: '65536' },
    routes: [
      async (scope) => {
        scope.get('/test/sse', { config: { scope: 'public' } }, async (request, reply) => {
          stream = scope.sse.open(request, reply)
        })
      }
    ]
  })
  const base = new URL(await listening(app))
  // a real client that asks for the stream and then never reads a byte
  const client = connect(Number(base.port), base.hostname)
  client.on('error', () => {})
  t.teardown(() => client.destroy())
  await once(client, 'connect')
  client.write(`GET /api/test/sse HTTP/1.1\r\nHost: ${base.host}\r\nAccept: text/event-stream\r\n\r\n`)
  client.pause()
  const open = await eventually(async () => stream)
  let ok = true
  let frames = 0
  // 16 KiB frames, far past what the kernel buffers on loopback
  while (ok && frames < 4000) {
    ok = open.write(`data: ${'x'.repeat(16 * 1024)}\n\n`)
    frames++
    if (frames % 64 === 0) await new Promise((resolve) => setImmediate(resolve))
  }
  t.notOk(ok, 'writes stop once the unread buffer passes the limit')
  t.ok(open.closed, 'the stream is closed')
  t.equal(app.sse.count, 0, 'and forgotten')
  client.resume()
  await eventually(async () => client.destroyed || client.readableEnded)
  t.pass('the connection is gone')
})

t.test('frames are chunks of an HTTP/1.1 body and bare bytes for an HTTP/1.0 client', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const base = new URL(await listening(app))
  const read = async (version: string) => {
    const client = connect(Number(base.port), base.hostname)
    client.on('error', () => {})
    t.teardown(() => client.destroy())
    await once(client, 'connect')
    let text = ''
    client.setEncoding('latin1').on('data', (chunk: string) => (text += chunk))
    client.write(`GET /api/runs/changes HTTP/${version}\r\nHost: ${base.host}\r\n\r\n`)
    await eventually(async () => text.includes(':ok'))
    return { client, text: () => text }
  }
  const http11 = await read('1.1')
  const http10 = await read('1.0')
  const run = await createRunVia(app, { prompt: 'framing' })
  await eventually(async () => http11.text().includes(run.id) && http10.text().includes(run.id))
  const frame11 = http11.text().slice(http11.text().indexOf('\r\n\r\n') + 4)
  const frame10 = http10.text().slice(http10.text().indexOf('\r\n\r\n') + 4)
  t.match(http11.text(), /transfer-encoding: chunked/i)
  const change = frame10.slice(frame10.indexOf('id: '))
  t.ok(frame10.startsWith(':ok\n\n'), 'HTTP/1.0: the body is the frames themselves')
  t.match(change, /^id: \d+\nevent: change\ndata: \{.*\}\n\n$/, 'one bare frame')
  t.ok(
    frame11.includes(`${Buffer.byteLength(change).toString(16)}\r\n${change}\r\n`),
    'HTTP/1.1: the same frame as one chunk'
  )
})

t.test('streams end when the app closes', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const base = await listening(app)
  const changes = await SseClient.open(`${base}/api/runs/changes`)
  t.equal(app.sse.count, 1)
  await app.close()
  await changes.until((c) => c.ended)
  t.equal(app.sse.count, 0)
})
