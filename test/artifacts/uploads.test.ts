import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { mintKey, signUpWithOrg, type Teardown } from '../helper.js'
import { buildArtifactsApp } from './group.js'
import { blobFiles, count, expirePins, multipart, PNG, sha256, temporaries, upload } from './helpers.js'

const LIMIT = 1000

async function appWithDir(t: Teardown, env: Record<string, string> = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-uploads-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const app = await buildArtifactsApp(t, { env: { DATA_DIR: dataDir, UPLOAD_MAX_BYTES: String(LIMIT), ...env } })
  return { app, dataDir }
}

t.test('an upload is stored once, byte for byte, with its type sniffed from the bytes', async (t) => {
  const { app, dataDir } = await appWithDir(t)
  const res = await upload(app, { filename: 'notes.md', type: 'text/markdown', bytes: '# Notes\nhello\n' })
  t.equal(res.statusCode, 201)
  const { upload: up } = res.json()
  t.same(Object.keys(up).sort(), ['contentType', 'createdAt', 'createdBy', 'id', 'name', 'sha256', 'size'])
  t.match(up, {
    name: 'notes.md',
    size: 14,
    contentType: 'text/markdown',
    sha256: sha256('# Notes\nhello\n'),
    createdBy: null
  })
  t.same(blobFiles(dataDir), [`${DEV_ORG.id}/${up.sha256}`], 'one blob file under its address')
  t.equal(
    readFileSync(join(dataDir, 'blobs', DEV_ORG.id, up.sha256.slice(0, 2), up.sha256), 'utf8'),
    '# Notes\nhello\n'
  )
  t.same(temporaries(dataDir), [], 'no temporary left')

  const content = await app.inject({ method: 'GET', url: `/api/uploads/${up.id}/content` })
  t.equal(content.statusCode, 200)
  t.equal(content.body, '# Notes\nhello\n')
  t.equal(content.headers['content-type'], 'text/markdown')
  t.equal(content.headers['x-content-type-options'], 'nosniff')
  t.equal(content.headers['content-security-policy'], 'sandbox')
  t.equal(content.headers['content-disposition'], 'attachment; filename="notes.md"')

  // the same bytes again: a second upload, still one blob
  const again = (await upload(app, { filename: 'copy.md', type: 'text/markdown', bytes: '# Notes\nhello\n' })).json()
    .upload
  t.not(again.id, up.id)
  t.equal(await count(app, 'blobs'), 1)
  t.equal(await count(app, 'uploads'), 2)
})

t.test(
  'sniffing: a known signature wins; text keeps a declared text type; anything else is octet-stream',
  async (t) => {
    const { app } = await appWithDir(t)
    const type = async (file: Parameters<typeof multipart>[0]) => (await upload(app, file)).json().upload.contentType
    t.equal(
      await type({ filename: 'x.txt', type: 'text/plain', bytes: PNG }),
      'image/png',
      'PNG bytes declared as text are a PNG'
    )
    t.equal(await type({ filename: 'x.bin', type: 'application/octet-stream', bytes: PNG }), 'image/png')
    t.equal(
      await type({ filename: 'page.html', type: 'text/html', bytes: '<html><body>hi</body></html>' }),
      'text/html'
    )
    t.equal(await type({ filename: 'a.json', type: 'application/json', bytes: '{"a":1}' }), 'application/json')
    t.equal(await type({ filename: 'a.txt', type: 'text/plain; charset=utf-8', bytes: 'plain' }), 'text/plain')
    t.equal(
      await type({ filename: 'a.txt', type: 'text/plain', bytes: Buffer.from([1, 0, 2, 0]) }),
      'application/octet-stream',
      'NUL bytes are not text'
    )
    t.equal(await type({ filename: 'a.foo', type: 'application/x-foo', bytes: 'hello' }), 'application/octet-stream')
    // a part without Content-Type is text/plain (RFC 7578 4.4)
    t.equal(await type({ filename: 'a', bytes: 'hello' }), 'text/plain', 'no declared type')
    t.equal(
      await type({ filename: 'b', bytes: Buffer.from([0, 1, 2]) }),
      'application/octet-stream',
      'no declared type, not text'
    )
  }
)

t.test('over UPLOAD_MAX_BYTES: 413 with no row, no blob and no temporary, every time', async (t) => {
  const { app, dataDir } = await appWithDir(t)
  for (let i = 0; i < 3; i++) {
    const res = await upload(app, {
      filename: 'big.bin',
      type: 'application/octet-stream',
      bytes: Buffer.alloc(LIMIT + 1 + i * 5000, 7)
    })
    t.equal(res.statusCode, 413)
    t.equal(res.json().error, 'payload_too_large')
  }
  t.equal(await count(app, 'uploads'), 0)
  t.equal(await count(app, 'blobs'), 0)
  t.same(blobFiles(dataDir), [])
  t.same(temporaries(dataDir), [])
  const exact = await upload(app, { filename: 'exact.bin', bytes: Buffer.alloc(LIMIT, 1) })
  t.equal(exact.statusCode, 201, 'exactly the limit is taken')
  t.equal(exact.json().upload.size, LIMIT)
})

t.test('refusals: not multipart 415, another field or no file 400; nothing stored', async (t) => {
  const { app } = await appWithDir(t)
  const json = await app.inject({ method: 'POST', url: '/api/uploads', payload: { file: 'x' } })
  t.equal(json.statusCode, 415)
  t.equal(json.json().error, 'unsupported_media_type')
  const field = await upload(app, { field: 'attachment', filename: 'a.txt', type: 'text/plain', bytes: 'x' })
  t.equal(field.statusCode, 400)
  const empty = await app.inject({
    method: 'POST',
    url: '/api/uploads',
    payload: '--b--\r\n',
    headers: { 'content-type': 'multipart/form-data; boundary=b' }
  })
  t.equal(empty.statusCode, 400)
  t.equal(await count(app, 'uploads'), 0)
})

t.test('a multipart body cut short is 400 bad_request, with no row, no blob and no temporary', async (t) => {
  const { app, dataDir } = await appWithDir(t)
  const body = multipart({ filename: 'notes.txt', type: 'text/plain', bytes: 'twelve bytes'.repeat(40) })
  const closing = body.payload.length - body.payload.lastIndexOf('\r\n--')
  // inside the file's bytes, inside the closing delimiter, and without its final `--`
  for (const cut of [120, closing - 3, 4]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/uploads',
      payload: body.payload.subarray(0, body.payload.length - cut),
      headers: body.headers
    })
    t.equal(res.statusCode, 400, `cut ${cut} bytes short`)
    t.same(Object.keys(res.json()).sort(), ['error', 'message'])
    t.equal(res.json().error, 'bad_request')
    t.match(res.json().message, /multipart body cannot be read/)
  }
  t.equal(await count(app, 'uploads'), 0)
  t.equal(await count(app, 'blobs'), 0)
  t.same(blobFiles(dataDir), [])
  t.same(temporaries(dataDir), [])
  t.equal(
    (await upload(app, { filename: 'notes.txt', type: 'text/plain', bytes: 'whole' })).statusCode,
    201,
    'a whole body is taken after them'
  )
})

t.test('list, read, delete; the bytes go with the sweep once nothing names them', async (t) => {
  const { app, dataDir } = await appWithDir(t)
  const ids: string[] = []
  for (let i = 0; i < 3; i++)
    ids.push((await upload(app, { filename: `f${i}.txt`, type: 'text/plain', bytes: `file ${i}` })).json().upload.id)
  const first = (await app.inject({ method: 'GET', url: '/api/uploads?limit=2' })).json()
  t.same(
    first.items.map((u: { id: string }) => u.id),
    [ids[2], ids[1]],
    'newest first'
  )
  const second = (await app.inject({ method: 'GET', url: `/api/uploads?limit=2&cursor=${first.nextCursor}` })).json()
  t.same(
    second.items.map((u: { id: string }) => u.id),
    [ids[0]]
  )
  t.equal(second.nextCursor, null)
  t.equal((await app.inject({ method: 'GET', url: `/api/uploads/${ids[0]}` })).json().upload.name, 'f0.txt')

  t.equal((await app.inject({ method: 'DELETE', url: `/api/uploads/${ids[0]}` })).statusCode, 204)
  t.equal((await app.inject({ method: 'GET', url: `/api/uploads/${ids[0]}` })).statusCode, 404)
  t.equal((await app.inject({ method: 'DELETE', url: `/api/uploads/${ids[0]}` })).statusCode, 404)
  t.equal(await app.artifacts.sweeper.sweep(), 0, 'a pinned blob is left alone')
  await expirePins(app)
  t.equal(await app.artifacts.sweeper.sweep(), 1, "the deleted upload's blob goes")
  t.equal(blobFiles(dataDir).length, 2)
  t.equal(await count(app, 'blobs'), 2)
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/uploads/${ids[1]}/content` })).body,
    'file 1',
    'the others stay readable'
  )
})

t.test('createdBy is the signed-in user; an API key cannot reach uploads', async (t) => {
  const { app } = await appWithDir(t)
  const owner = await signUpWithOrg(app)
  const res = await upload(app, { filename: 'a.txt', type: 'text/plain', bytes: 'mine' }, { cookie: owner.cookie })
  t.equal(res.json().upload.createdBy, owner.user.id)
  const key = await mintKey(app, owner.cookie)
  const denied = await app.inject({ method: 'GET', url: '/api/uploads', headers: { authorization: key.authorization } })
  t.equal(denied.statusCode, 401, 'uploads are off the key allowlist')
})
