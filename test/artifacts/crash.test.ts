import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { waitFor } from '../helper.js'
import { startServer } from '../server-process.js'

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex')

/** Every file under blobs/<org>/<xx>/ (temporaries apart). */
function blobFiles(dataDir: string): string[] {
  const root = join(dataDir, 'blobs')
  const out: string[] = []
  if (!existsSync(root)) return out
  for (const org of readdirSync(root).filter((n) => n !== '.tmp')) {
    for (const prefix of readdirSync(join(root, org)))
      for (const name of readdirSync(join(root, org, prefix))) out.push(join(root, org, prefix, name))
  }
  return out
}

/** Starts a request whose body is sent in part and then held open; resolves once the head is written. */
function hangingRequest(url: string, method: string, headers: Record<string, string>, first: Buffer) {
  const req = request(url, { method, headers })
  req.on('error', () => {})
  req.write(first)
  return req
}

t.test('killed mid-upload and mid-PUT: no row names a missing blob, no partial blob under an address', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-crash-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = { DATA_DIR: dataDir, UPLOAD_MAX_BYTES: String(64 * 1024 * 1024) }
  const first = await startServer(env)
  t.teardown(() => first.kill('SIGKILL'))
  const api = (path: string, init?: RequestInit) => fetch(`${first.url}/api${path}`, init)

  // acknowledged writes
  const acknowledged: Array<{ path: string; sha: string }> = []
  for (let i = 0; i < 3; i++) {
    const bytes = randomBytes(100_000 + i)
    const form = new FormData()
    form.append('file', new Blob([bytes], { type: 'application/octet-stream' }), `file-${i}.bin`)
    const res = await api('/uploads', { method: 'POST', body: form })
    t.equal(res.status, 201)
    const { upload } = (await res.json()) as { upload: { id: string; sha256: string } }
    t.equal(upload.sha256, sha256(bytes))
    acknowledged.push({ path: `/uploads/${upload.id}/content`, sha: upload.sha256 })
  }
  const created = await api('/artifacts', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'doc.md', content: 'version one', contentType: 'text/markdown' })
  })
  const { artifact } = (await created.json()) as { artifact: { id: string } }
  const edited = await api(`/artifacts/${artifact.id}/content`, {
    method: 'PUT',
    headers: { 'if-match': '"v1"', 'content-type': 'text/plain' },
    body: 'version two'
  })
  t.equal(edited.status, 200)
  acknowledged.push({ path: `/artifacts/${artifact.id}/versions/1/content`, sha: sha256(Buffer.from('version one')) })
  acknowledged.push({ path: `/artifacts/${artifact.id}/versions/2/content`, sha: sha256(Buffer.from('version two')) })

  // in flight: an upload and a PUT whose bodies are half sent when the process dies
  const boundary = 'crashboundary'
  const uploadHead = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="half.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`
  )
  const upload = hangingRequest(
    `${first.url}/api/uploads`,
    'POST',
    {
      'content-type': `multipart/form-data; boundary=${boundary}`,
      'content-length': String(uploadHead.length + 8_000_000 + 50)
    },
    Buffer.concat([uploadHead, randomBytes(3_000_000)])
  )
  const put = hangingRequest(
    `${first.url}/api/artifacts/${artifact.id}/content`,
    'PUT',
    { 'if-match': '"v2"', 'content-type': 'text/plain', 'content-length': '8000000' },
    randomBytes(3_000_000)
  )
  await waitFor('both bodies streaming into temporaries', async () => {
    const tmp = join(dataDir, 'blobs', '.tmp')
    return existsSync(tmp) && readdirSync(tmp).length >= 2
  })
  first.kill('SIGKILL')
  await first.exit
  upload.destroy()
  put.destroy()

  for (const file of blobFiles(dataDir))
    t.equal(sha256(readFileSync(file)), file.split('/').pop(), 'every blob under an address holds exactly its bytes')

  const second = await startServer(env)
  t.teardown(() => second.kill('SIGKILL'))
  const again = (path: string) => fetch(`${second.url}/api${path}`)
  for (const { path, sha } of acknowledged) {
    const res = await again(path)
    t.equal(res.status, 200, path)
    t.equal(sha256(Buffer.from(await res.arrayBuffer())), sha, `${path} is intact`)
  }
  const uploads = (await (await again('/uploads')).json()) as { items: Array<{ name: string }> }
  t.same(
    uploads.items.map((u) => u.name).sort(),
    ['file-0.bin', 'file-1.bin', 'file-2.bin'],
    'the cut upload left no row'
  )
  const current = (await (await again(`/artifacts/${artifact.id}`)).json()) as { artifact: { version: number } }
  t.equal(current.artifact.version, 2, 'the cut PUT made no version')
  // every row names bytes that are there: each upload and each version reads back whole
  for (const u of ((await (await again('/uploads')).json()) as { items: Array<{ id: string; sha256: string }> })
    .items) {
    t.equal(sha256(Buffer.from(await (await again(`/uploads/${u.id}/content`)).arrayBuffer())), u.sha256)
  }
  second.kill('SIGTERM')
  await second.exit
})
