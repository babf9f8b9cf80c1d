import { connect } from 'node:net'
import t, { type Test } from 'tap'
import { embeddedOnly } from '../passes.js'
import { buildTestApp, type Teardown } from '../helper.js'

interface RawAnswer {
  status: number
  headers: Record<string, string>
  body: string
}

/**
 * Sends bytes as they are (no client-side URL or header checks) and reads the answer until the server closes or has
 * sent it whole.
 */
function raw(port: number, chunks: string[]): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      for (const chunk of chunks) socket.write(chunk)
    })
    let data = ''
    socket.setEncoding('latin1')
    const done = () => {
      const end = data.indexOf('\r\n\r\n')
      if (end < 0) return reject(new Error(`no answer: ${JSON.stringify(data.slice(0, 200))}`))
      const [statusLine, ...lines] = data.slice(0, end).split('\r\n')
      const headers: Record<string, string> = {}
      for (const line of lines) {
        const colon = line.indexOf(':')
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
      }
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body: data.slice(end + 4) })
    }
    socket.on('data', (chunk) => {
      data += chunk
      const end = data.indexOf('\r\n\r\n')
      const length = /\r\ncontent-length: (\d+)/i.exec(data.slice(0, end))
      if (end >= 0 && length && data.length >= end + 4 + Number(length[1])) {
        socket.destroy()
        done()
      }
    })
    socket.on('close', () => done())
    socket.on('error', () => {})
  })
}

async function listening(t: Teardown, env: Record<string, string> = {}) {
  const app = await buildTestApp(t, { env })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  return { app, port: address.port }
}

// one app for every case (building one per case takes too long on a busy machine); a
// short request timeout for the 408 case, which none of the others comes near
const { app, port } = await listening(t, { REQUEST_TIMEOUT_MS: '1000' })

function refusal(
  t: Test,
  res: RawAnswer | { statusCode: number; headers: Record<string, unknown>; body: string },
  status: number,
  error: string
) {
  const code = 'status' in res ? res.status : res.statusCode
  t.equal(code, status, `${status} ${error}`)
  t.same(Object.keys(JSON.parse(res.body)).sort(), ['error', 'message'], 'the error body')
  t.equal(JSON.parse(res.body).error, error)
  t.equal(res.headers['x-service-api-compat'], 'run-events-v1', 'release headers')
  t.match(res.headers['x-service-release-fingerprint'], /^run-events-v1:/)
  t.equal(res.headers['x-content-type-options'], 'nosniff', 'security headers')
  t.match(res.headers['content-security-policy'], /default-src 'none'/)
  t.equal(res.headers['cache-control'], 'no-store')
  t.match(res.headers['content-type'], /^application\/json/)
  t.notOk(/FST_ERR/.test(res.body), 'no framework code')
}

t.test('headers too large: 431 headers_too_large written on the socket, with our headers', embeddedOnly, async (t) => {
  const res = await raw(port, [`GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`])
  refusal(t, res, 431, 'headers_too_large')
  t.match(res.headers['x-request-id'], /^[0-9a-f-]{36}$/)
})

t.test(
  'an over-long URL: 414 uri_too_long, whether Node, the router or the 404 handler sees it first',
  embeddedOnly,
  async (t) => {
    refusal(
      t,
      await raw(port, [`GET /api/runs/${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`]),
      414,
      'uri_too_long'
    )
    const param = await app.inject({ method: 'GET', url: `/api/runs/${'a'.repeat(1025)}` })
    refusal(t, param, 414, 'uri_too_long')
    t.notOk(param.body.includes('aaaa'), 'the URL is not echoed')
    refusal(t, await app.inject({ method: 'GET', url: `/api/${'a/'.repeat(1100)}` }), 414, 'uri_too_long')
    t.equal(
      (await app.inject({ method: 'GET', url: `/api/runs/${'a'.repeat(1024)}` })).statusCode,
      400,
      'a parameter at the limit reaches its schema'
    )
    // a secret's name one character past its maximum is the schema's to refuse, naming it
    const secret = await app.inject({ method: 'PUT', url: `/api/secrets/A${'B'.repeat(128)}`, payload: { value: 'x' } })
    t.equal(secret.statusCode, 400)
    t.equal(secret.json().error, 'validation_failed')
    t.match(secret.json().details, [{ path: '/params/name' }])
  }
)

t.test('a malformed URL: 400 bad_request, from the router or from Node', embeddedOnly, async (t) => {
  for (const url of ['/api/runs/%zz', '/api/runs/%ED%A0%80', '/api/runs/%C0%AF']) {
    refusal(t, await app.inject({ method: 'GET', url }), 400, 'bad_request')
  }
  refusal(t, await raw(port, ['GET /api/ru ns HTTP/1.1\r\nHost: x\r\n\r\n']), 400, 'bad_request')
  refusal(t, await raw(port, ['GET /api/runs/\x01 HTTP/1.1\r\nHost: x\r\n\r\n']), 400, 'bad_request')
})

t.test('a known path with another method: 405 with Allow; an unknown path stays 404', embeddedOnly, async (t) => {
  const runs = await app.inject({ method: 'DELETE', url: '/api/runs?limit=1' })
  refusal(t, runs, 405, 'method_not_allowed')
  t.equal(runs.headers.allow, 'GET, HEAD, POST')
  const run = await app.inject({ method: 'PUT', url: '/api/runs/0190b8f0-0000-7000-8000-000000000000' })
  refusal(t, run, 405, 'method_not_allowed')
  t.equal(run.headers.allow, 'GET, HEAD')
  const health = await app.inject({ method: 'POST', url: '/api/health', payload: {} })
  t.equal(health.statusCode, 405)
  t.equal(health.headers.allow, 'GET, HEAD')
  const unknown = await app.inject({ method: 'DELETE', url: '/api/nothing-here' })
  refusal(t, unknown, 404, 'not_found')
  t.equal(unknown.headers.allow, undefined)
})

t.test(
  'a body not finished within REQUEST_TIMEOUT_MS: 408 request_timeout, and the handler never runs',
  embeddedOnly,
  async (t) => {
    const before = await app.inject({ method: 'GET', url: '/api/runs' })
    const res = await raw(port, [
      'POST /api/runs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n',
      '{"prompt": "slow'
    ])
    refusal(t, res, 408, 'request_timeout')
    t.equal(res.headers.connection, 'close')
    const after = await app.inject({ method: 'GET', url: '/api/runs' })
    t.equal(after.json().items.length, before.json().items.length, 'no run was created')
  }
)

t.test('x-request-id is echoed only when it is at most 128 visible ASCII characters', embeddedOnly, async (t) => {
  const echo = async (id: string) =>
    (await app.inject({ method: 'GET', url: '/api/health', headers: { 'x-request-id': id } })).headers['x-request-id']
  t.equal(await echo('a'.repeat(128)), 'a'.repeat(128))
  t.equal(await echo('trace-1/2:3'), 'trace-1/2:3')
  for (const bad of ['a'.repeat(129), 'a'.repeat(10_000), 'has space', 'caf\u00e9']) {
    const got = await echo(bad)
    t.match(
      got,
      /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
      `${bad.slice(0, 20)}… is replaced by a fresh id`
    )
  }
})
