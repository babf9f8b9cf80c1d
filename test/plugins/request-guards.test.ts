import { request as httpRequest } from 'node:http'
import { gzipSync } from 'node:zlib'
import t, { type Test } from 'tap'
import { embeddedOnly } from '../passes.js'
import { count, multipart } from '../artifacts/helpers.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'

/**
 * The Content-Encoding guard of plugins/request-guards.ts: no route decodes a compressed
 * body, so one sent with any coding but `identity` is 415 unsupported_media_type, with
 * Accept-Encoding: identity, before any of it is read; nothing is stored.
 */
const app = await buildTestApp(t, { env: { RUN_WORKER_CONCURRENCY: '0', SERVICE_COMMIT: 'c0ffee' } })
const RECORD = JSON.stringify({ title: 'compressed', body: 'a body' })

const refused = (
  t: Test,
  res: { statusCode: number; headers: Record<string, unknown>; json(): unknown },
  what: string
) => {
  t.equal(res.statusCode, 415, what)
  const body = res.json() as Record<string, unknown>
  t.same(Object.keys(body).sort(), ['error', 'message'], `${what}: the error body`)
  t.equal(body.error, 'unsupported_media_type', what)
  t.match(body.message, /Content-Encoding/, what)
  t.equal(res.headers['accept-encoding'], 'identity', `${what}: says what it takes`)
  t.equal(res.headers['x-service-release-fingerprint'], 'run-events-v1:c0ffee', `${what}: the release headers`)
}

t.test(
  'a JSON body with a content coding is 415, whatever the coding, and creates nothing',
  embeddedOnly,
  async (t) => {
    const owner = await signUpWithOrg(app)
    const json = { 'content-type': 'application/json', cookie: owner.cookie }
    // gzip bytes as they would come, and plain JSON that only claims a coding (it was taken as JSON)
    const gzip = await app.inject({
      method: 'POST',
      url: '/api/knowledge',
      headers: { ...json, 'content-encoding': 'gzip' },
      payload: gzipSync(RECORD)
    })
    refused(t, gzip, 'gzip bytes')
    for (const encoding of ['gzip', 'GZIP', 'deflate', 'br', 'zstd', 'x-custom', 'identity, gzip', 'gzip, identity']) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge',
        headers: { ...json, 'content-encoding': encoding },
        payload: RECORD
      })
      refused(t, res, `Content-Encoding: ${encoding}`)
    }
    const run = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { ...json, 'content-encoding': 'gzip', 'idempotency-key': 'gzip-run' },
      payload: JSON.stringify({ prompt: 'hi' })
    })
    refused(t, run, 'a run')
    t.equal(await count(app, 'knowledge_records'), 0)
    t.equal(await count(app, 'runs'), 0)
    t.equal(await count(app, 'idempotency_keys'), 0, 'the idempotency key was not taken')

    // identity (any case) is the body as it is
    for (const encoding of ['identity', 'Identity', '']) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge',
        headers: { ...json, 'content-encoding': encoding },
        payload: RECORD
      })
      t.equal(res.statusCode, 201, `Content-Encoding: ${JSON.stringify(encoding)}`)
    }
    t.equal(await count(app, 'knowledge_records'), 3)
    // a request without a body is not refused for the header
    const read = await app.inject({
      method: 'GET',
      url: '/api/knowledge',
      headers: { cookie: owner.cookie, 'content-encoding': 'gzip' }
    })
    t.equal(read.statusCode, 200)
    const emptyDelete = await app.inject({
      method: 'DELETE',
      url: `/api/knowledge/${read.json().items[0].id}`,
      headers: { cookie: owner.cookie, 'content-encoding': 'gzip' }
    })
    t.equal(emptyDelete.statusCode, 204, 'a DELETE without a body')
  }
)

t.test('uploads and raw content writes: 415, no row, no blob, no new version', embeddedOnly, async (t) => {
  const owner = await signUpWithOrg(app)
  const cookie = owner.cookie
  const blobs = await count(app, 'blobs')
  const file = multipart({ filename: 'notes.txt', type: 'text/plain', bytes: 'hello' })
  for (const url of ['/api/uploads', '/api/knowledge/documents']) {
    const res = await app.inject({
      method: 'POST',
      url,
      headers: { ...file.headers, cookie, 'content-encoding': 'gzip' },
      payload: gzipSync(file.payload)
    })
    refused(t, res, url)
  }
  t.equal(await count(app, 'uploads'), 0)
  t.equal(await count(app, 'knowledge_documents'), 0)
  t.equal(await count(app, 'blobs'), blobs)

  const artifact = (
    await app.inject({
      method: 'POST',
      url: '/api/artifacts',
      headers: { cookie },
      payload: { name: 'a.txt', content: 'one' }
    })
  ).json().artifact
  const put = await app.inject({
    method: 'PUT',
    url: `/api/artifacts/${artifact.id}/content`,
    headers: { cookie, 'content-type': 'text/plain', 'if-match': '"v1"', 'content-encoding': 'gzip' },
    payload: gzipSync('two')
  })
  refused(t, put, 'PUT content')
  const content = await app.inject({ method: 'GET', url: `/api/artifacts/${artifact.id}/content`, headers: { cookie } })
  t.equal(content.body, 'one')
  t.equal(content.headers.etag, '"v1"')
})

t.test('over real HTTP, a chunked gzip body is refused too', embeddedOnly, async (t) => {
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  const owner = await signUpWithOrg(app)
  const records = await count(app, 'knowledge_records')
  const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest(
      `${base}/api/knowledge`,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-encoding': 'gzip',
          'transfer-encoding': 'chunked',
          cookie: owner.cookie
        }
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          text += chunk
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }))
      }
    )
    req.on('error', reject)
    req.end(gzipSync(RECORD))
  })
  t.equal(status, 415)
  t.equal(JSON.parse(body).error, 'unsupported_media_type')
  t.equal(await count(app, 'knowledge_records'), records, 'no record')
})
