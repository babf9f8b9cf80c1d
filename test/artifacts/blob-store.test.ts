import { randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { buffer } from 'node:stream/consumers'
import t from 'tap'
import { BlobMissing, BlobTooLarge, FsBlobStore, HEAD_BYTES, type BlobStore } from '../../src/artifacts/blob-store.js'
import { buildTestApp, type Teardown } from '../helper.js'
import { count, expirePins, sha256, upload } from './helpers.js'
import { startLocalS3 } from './s3-server.js'

const ORG = '00000000-0000-7000-8000-00000000b10b'

/** The store contract: what every BlobStore must do, run against each implementation. */
function storeContract(
  name: string,
  make: (t: Teardown) => Promise<{ store: BlobStore; temporaries(): Promise<string[]> } | { skip: string }>
) {
  t.test(`${name}: the blob store contract`, async (t) => {
    const made = await make(t)
    if ('skip' in made) return t.plan(0, made.skip)
    const { store } = made

    const bytes = randomBytes(5000)
    const staged = await store.stage(Readable.from([bytes.subarray(0, 1000), bytes.subarray(1000)]), 10_000)
    t.equal(staged.sha256, sha256(bytes))
    t.equal(staged.size, 5000)
    t.same(staged.head, bytes.subarray(0, HEAD_BYTES), 'the head for sniffing')
    await t.rejects(store.read(ORG, staged.sha256), BlobMissing, 'not readable before commit')
    await store.commit(ORG, staged)
    t.same(await buffer(await store.read(ORG, staged.sha256)), bytes)
    t.same(
      await buffer(await store.read(ORG, staged.sha256, { start: 10, end: 19 })),
      bytes.subarray(10, 20),
      'a range'
    )
    t.same(await made.temporaries(), [], 'the temporary is gone')

    // the same bytes again: committing over them is harmless
    const again = await store.stage(Readable.from([bytes]), 10_000)
    await store.commit(ORG, again)
    t.same(await buffer(await store.read(ORG, staged.sha256)), bytes)

    await t.rejects(
      store.stage(Readable.from([randomBytes(600), randomBytes(600)]), 1000),
      BlobTooLarge,
      'over the limit'
    )
    t.same(await made.temporaries(), [], 'nothing kept of a body over the limit')

    const failing = new Readable({
      read() {
        this.destroy(new Error('client went away'))
      }
    })
    await t.rejects(store.stage(failing, 1000), /client went away/)
    t.same(await made.temporaries(), [], 'nothing kept of a body that broke off')

    const left = await store.stage(Readable.from([Buffer.from('abandoned')]), 1000)
    t.equal((await made.temporaries()).length, 1)
    t.equal(await store.cleanTemporaries(60 * 60 * 1000), 0, 'a fresh temporary is left alone')
    t.equal(await store.cleanTemporaries(-5000), 1, 'an old one goes')
    t.same(await made.temporaries(), [])
    await store.discard(left)

    await store.remove(ORG, staged.sha256)
    await t.rejects(store.read(ORG, staged.sha256), BlobMissing)
    await store.remove(ORG, staged.sha256)
    t.pass('removing a missing blob is not an error')
    await t.rejects(
      store.read('../etc', staged.sha256),
      /invalid blob address/,
      'an id cannot name a path outside the store'
    )
  })
}

storeContract('fs', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'cairn-blobs-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const tmp = join(root, '.tmp')
  return {
    store: new FsBlobStore(root),
    temporaries: async () => {
      try {
        return readdirSync(tmp)
      } catch {
        return []
      }
    }
  }
})

storeContract('s3', async (t) => {
  const s3 = await startLocalS3(t)
  if ('skip' in s3) return s3
  return { store: s3.store, temporaries: () => s3.keys('.tmp/') }
})

t.test('s3: a body larger than one part goes up as a multipart upload and reads back whole', async (t) => {
  const s3 = await startLocalS3(t)
  if ('skip' in s3) return t.plan(0, s3.skip)
  const big = randomBytes(20 * 1024 * 1024)
  const staged = await s3.store.stage(
    Readable.from([big.subarray(0, 7_000_000), big.subarray(7_000_000)]),
    64 * 1024 * 1024
  )
  await s3.store.commit(ORG, staged)
  t.equal(sha256(await buffer(await s3.store.read(ORG, staged.sha256))), sha256(big))
  t.same(
    await s3.keys(),
    [`${ORG}/${staged.sha256.slice(0, 2)}/${staged.sha256}`],
    'one object under its address, no temporary'
  )
})

t.test('s3: the routes on an S3 store (upload, content with a range, delete and sweep)', async (t) => {
  const s3 = await startLocalS3(t)
  if ('skip' in s3) return t.plan(0, s3.skip)
  const app = await buildTestApp(t, { blobStore: s3.store })
  const up = (await upload(app, { filename: 'a.txt', type: 'text/plain', bytes: 'hello s3' })).json().upload
  const range = await app.inject({
    method: 'GET',
    url: `/api/uploads/${up.id}/content`,
    headers: { range: 'bytes=6-7' }
  })
  t.equal(range.statusCode, 206)
  t.equal(range.body, 's3')
  const a = (
    await app.inject({
      method: 'POST',
      url: '/api/artifacts',
      payload: { name: 'n.md', content: '# s3', contentType: 'text/markdown' }
    })
  ).json().artifact
  t.equal((await app.inject({ method: 'GET', url: `/api/artifacts/${a.id}/content` })).body, '# s3')
  t.equal((await s3.keys()).length, 2)
  await app.inject({ method: 'DELETE', url: `/api/uploads/${up.id}` })
  await app.inject({ method: 'DELETE', url: `/api/artifacts/${a.id}` })
  await expirePins(app)
  t.equal(await app.artifacts.sweeper.sweep(), 2)
  t.same(await s3.keys(), [], 'the bucket is empty')
  t.equal(await count(app, 'blobs'), 0)
})

t.test('the file store refuses a URL for its directory, so no folder is named after one', async (t) => {
  for (const root of ['memory://', 'memory://cairn/blobs', 'postgres://postgres@127.0.0.1:5432/postgres']) {
    t.throws(() => new FsBlobStore(root), /needs a directory, not a URL/, root)
  }
  t.doesNotThrow(() => new FsBlobStore(join(tmpdir(), 'cairn-blobs-never-written')), 'a path is a directory')
  // the service's own: DATA_DIR=memory:// keeps its blobs in a temporary directory
  const app = await buildTestApp(t, { env: { DATA_DIR: 'memory://', ARTIFACT_STORE: 'fs' } })
  const res = await upload(app, { filename: 'note.txt', type: 'text/plain', bytes: 'kept in a temporary directory' })
  t.equal(res.statusCode, 201)
  const content = await app.inject({ method: 'GET', url: `/api/uploads/${res.json().upload.id as string}/content` })
  t.equal(content.body, 'kept in a temporary directory', 'and read back')
  t.notOk(
    readdirSync('.').some((name) => name.startsWith('memory:')),
    'no memory: folder in the working directory'
  )
})
