import { mkdtempSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import t from 'tap'
import WebSocket from 'ws'
import { buildTestApp, createTestDatabase, waitFor } from '../helper.js'
import { messages, startServer, type Started } from '../server-process.js'
import { SseClient } from './sse-client.js'

/**
 * SIGTERM with long runs, on the real server process: the runs are handed back at once
 * (queued again, nothing failed) and finished exactly once by another instance (Postgres)
 * or by the next start on the same data directory (the embedded database allows one
 * process); the process exits 0 within SHUTDOWN_GRACE_MS; a request in flight finishes,
 * a new one gets the 503 error body with Retry-After and the release headers; an event
 * stream ends with a reconnectable close and resumes where it stopped.
 */

const GRACE_MS = 6000
// 300 words, a second apart on A: each run would take 5 minutes there, far longer than the
// grace and than starting the other instance on a loaded machine (at 100 ms apart, 30 s, a
// machine at a load of 16 on 2 cores finished the runs on A before it stopped); the instance
// that resumes them streams words without a pause
const PROMPT = Array.from({ length: 300 }, (_, i) => `w${i}`).join(' ')

t.test(
  'SIGTERM hands running runs back at once, exits 0 in time, and another instance finishes each once',
  async (t) => {
    const { url } = await createTestDatabase(t)
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-shutdown-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    const env = {
      DATA_DIR: dataDir,
      ...(url ? { DATABASE_URL: url } : {}),
      RUN_POLL_MS: '100',
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
      SANDBOX_PROVIDER: 'none',
      SERVICE_COMMIT: 'abc123'
    }
    const servers: Started[] = []
    t.teardown(() => {
      for (const s of servers) s.kill('SIGKILL')
    })
    const a = await startServer({ ...env, ECHO_WORD_DELAY_MS: '1000' })
    servers.push(a)

    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${a.url}/api/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: PROMPT })
      })
      t.equal(res.status, 201)
      ids.push(((await res.json()) as { run: { id: string } }).run.id)
    }
    const status = async (base: string, id: string) =>
      ((await (await fetch(`${base}/api/runs/${id}`)).json()) as { run: { status: string } }).run.status
    await waitFor('all three running on A', async () =>
      (await Promise.all(ids.map((id) => status(a.url, id)))).every((s) => s === 'running')
    )
    const stream = await SseClient.open(`${a.url}/api/runs/${ids[0]}/events`)
    t.teardown(() => stream.close())
    await stream.until((c) => c.events('message.delta').length >= 2)

    // on Postgres the other instance is up before A stops; it takes the runs as A gives them back
    const b = url ? await startServer(env) : null
    if (b) servers.push(b)

    // a request in flight at SIGTERM (its body half sent), and one pipelined behind it
    const socket = connect(Number(new URL(a.url).port), '127.0.0.1')
    await new Promise((resolve) => socket.once('connect', resolve))
    let raw = ''
    socket.setEncoding('utf8').on('data', (chunk: string) => (raw += chunk))
    const body = JSON.stringify({ prompt: 'sent as A stops' })
    // `100 Continue` is sent as the request is taken in, in the tick its onRequest hooks run
    socket.write(
      `POST /api/runs HTTP/1.1\r\nhost: ${new URL(a.url).host}\r\nexpect: 100-continue\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`
    )
    await waitFor('the half-sent request is being read', async () => raw.startsWith('HTTP/1.1 100 Continue\r\n\r\n'))
    raw = raw.slice('HTTP/1.1 100 Continue\r\n\r\n'.length)

    const stoppedAt = Date.now()
    t.ok(a.kill('SIGTERM'))
    await waitFor('A refuses new requests', async () =>
      messages(a.output()).includes('shutting down: new requests are answered 503')
    )
    socket.write(
      `${body.slice(10)}GET /api/runs?limit=1 HTTP/1.1\r\nhost: ${new URL(a.url).host}\r\nx-request-id: after-sigterm\r\n\r\n`
    )
    t.equal(await a.exit, 0, 'exits 0')
    const took = Date.now() - stoppedAt
    t.ok(took < GRACE_MS, `within SHUTDOWN_GRACE_MS (${took} ms)`)
    t.notMatch(a.output(), /killed by timeout/)
    t.ok(
      messages(a.output()).includes('run worker: 3 running runs handed back to the queue'),
      'the runs were handed back'
    )

    // the answers on that connection: the request in flight finished, the one behind it was refused
    await waitFor('both answers', async () => socket.destroyed || raw.split('HTTP/1.1 ').length > 2)
    socket.destroy()
    const [first, second] = raw.split(/(?=HTTP\/1\.1 )/)
    t.match(first, /^HTTP\/1\.1 201 /, 'the request in flight finished')
    t.match(second, /^HTTP\/1\.1 503 /, 'the next one is refused')
    const [head, refused] = second!.split('\r\n\r\n')
    const headers = Object.fromEntries(
      head!
        .split('\r\n')
        .slice(1)
        .map((line) => {
          const at = line.indexOf(':')
          return [line.slice(0, at).toLowerCase(), line.slice(at + 1).trim()]
        })
    )
    t.same(JSON.parse(refused!), {
      error: 'service_unavailable',
      message: 'this server is shutting down; retry shortly'
    })
    t.match(headers, {
      'retry-after': '1',
      connection: 'close',
      'content-type': 'application/json; charset=utf-8',
      'x-service-release-fingerprint': 'run-events-v1:abc123',
      'x-service-api-compat': 'run-events-v1',
      'x-request-id': 'after-sigterm',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff'
    })
    const late = JSON.parse(first!.split('\r\n\r\n')[1]!.replace(/^[0-9a-f]+\r\n/, '')) as { run: { id: string } }

    // the event stream ended with a reconnectable close, not `end`
    await stream.until((c) => c.ended)
    t.equal(stream.retry, 1000, 'told when to reconnect')
    t.notOk(stream.events('end').length, 'no end: the run is not over')

    const next = b ?? (await startServer(env))
    if (!b) servers.push(next)
    // the stream resumes where it stopped, on the instance that finishes the run
    const resumed = await SseClient.open(`${next.url}/api/runs/${ids[0]}/events`, {
      headers: { 'last-event-id': stream.lastId()! }
    })
    t.teardown(() => resumed.close())
    await resumed.until((c) => c.ended, 60_000)
    t.same(
      resumed
        .events()
        .slice(-2)
        .map((f) => f.event),
      ['run.succeeded', 'end']
    )
    t.same(
      resumed.json(resumed.events('run.queued')[0]!).data,
      { engine: 'echo', model: 'echo', requeued: true },
      'the stream is told the run starts over'
    )

    for (const id of [...ids, late.run.id]) {
      await waitFor(`run ${id} succeeded`, async () => (await status(next.url, id)) === 'succeeded', 60_000)
      const history = await SseClient.open(`${next.url}/api/runs/${id}/events`)
      await history.until((c) => c.ended)
      const lifecycle = history
        .events()
        .filter((f) => f.event.startsWith('run.'))
        .map((f) => f.event)
      t.same(
        lifecycle,
        id === late.run.id
          ? ['run.queued', 'run.started', 'run.succeeded']
          : ['run.queued', 'run.started', 'run.queued', 'run.started', 'run.succeeded'],
        `run ${id}: handed back once, finished once, never failed`
      )
    }
    t.ok(next.kill('SIGTERM'))
    t.equal(await next.exit, 0)
  }
)

t.test('at shutdown a WebSocket closes with 1012 (service restart), which a client reconnects after', async (t) => {
  const app = await buildTestApp(t, {
    extend: (app) => {
      app.get('/ws-probe', { websocket: true }, (socket) => socket.send('open'))
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const socket = new WebSocket(`ws://127.0.0.1:${(app.server.address() as { port: number }).port}/ws-probe`)
  await once(socket, 'message')
  const closed = once(socket, 'close')
  await app.close()
  const [code, reason] = (await closed) as [number, Buffer]
  t.equal(code, 1012)
  t.equal(reason.toString(), 'the server is restarting; reconnect')
})

t.test('at shutdown a chat stream ends with `event: end` saying why, and when to send it again', async (t) => {
  // 100 words 10 s apart: the answer is in flight when the server stops
  const app = await buildTestApp(t, { env: { ECHO_WORD_DELAY_MS: '10000' } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/api/chat`
  const chat = await SseClient.open(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ') }]
    })
  })
  t.teardown(() => chat.close())
  await chat.until((c) => c.events('token').length === 1)
  await app.close()
  await chat.until((c) => c.ended)
  const frames = chat.events().map((f) => f.event)
  t.equal(frames.at(-1), 'end', 'the last frame is end')
  t.ok(
    frames.slice(0, -1).every((e) => e === 'token'),
    'tokens before it, and no done: the answer was cut short'
  )
  t.same(chat.json(chat.events('end')[0]!), {
    reason: 'shutting_down',
    message: 'the server is shutting down; send the request again'
  })
  t.equal(chat.retry, 1000, 'told when to send it again')
})
