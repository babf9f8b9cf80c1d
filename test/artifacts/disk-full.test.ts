// A full disk (ENOSPC, EDQUOT) while an upload or a document is written: 507
// insufficient_storage with the error body and the usual headers, the connection closed (the
// body was not read to its end), nothing half-written kept or referenced, and readiness 503
// until a write succeeds again.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import t, { type Test } from 'tap'
import { FsBlobStore, type StagedBlob } from '../../src/artifacts/blob-store.js'
import { buildTestApp, waitFor } from '../helper.js'
import { count, multipart, upload } from './helpers.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

/** A 1 MB tmpfs for the blobs, or why there is none (mounting needs root, or CAP_SYS_ADMIN). */
function smallDisk(t: { teardown(fn: () => unknown): void }): string | { skip: string } {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-full-disk-'))
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir], { stdio: 'pipe' })
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    return {
      skip: `cannot mount a tmpfs here (${
        String((err as { stderr?: Buffer }).stderr ?? err)
          .trim()
          .split('\n')[0]
      })`
    }
  }
  t.teardown(() => {
    execFileSync('umount', [dir])
    rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

async function sendDocument(app: App, bytes: Buffer) {
  const body = multipart({ filename: 'big.md', type: 'text/markdown', bytes })
  return app.inject({ method: 'POST', url: '/api/knowledge/documents', payload: body.payload, headers: body.headers })
}

async function ready(app: App) {
  return app.inject({ method: 'GET', url: '/api/health?ready=1' })
}

function checkFull(t: Test, res: Awaited<ReturnType<App['inject']>>, what: string) {
  t.equal(res.statusCode, 507, `${what}: 507`)
  t.same(res.json(), {
    error: 'insufficient_storage',
    message: 'the server has no room to store this now; try again later'
  })
  t.equal(res.headers.connection, 'close', `${what}: the connection closes (the body was not read to its end)`)
  t.equal(res.headers['retry-after'], '30')
  t.equal(res.headers['x-service-api-compat'], 'run-events-v1', `${what}: the release headers`)
  t.ok(res.headers['x-request-id'])
}

const disk = smallDisk(t)

t.test(
  'a real full disk (1 MB tmpfs): 507, nothing kept, readiness 503 until there is room again',
  { skip: typeof disk === 'string' ? false : disk.skip },
  async (t) => {
    const root = disk as string
    const app = await buildTestApp(t, { blobStore: new FsBlobStore(root), env: { KNOWLEDGE_WORKER: 'false' } })
    // ready before the disk fills (the readiness ping has 800 ms, which a loaded machine can miss once)
    await waitFor('ready', async () => (await ready(app)).statusCode === 200)
    // most of the disk is taken by something else
    writeFileSync(join(root, 'filler'), Buffer.alloc(700 * 1024, 1))

    const big = Buffer.alloc(600 * 1024, 2)
    checkFull(t, await upload(app, { filename: 'big.bin', type: 'application/octet-stream', bytes: big }), 'an upload')
    checkFull(t, await sendDocument(app, big), 'a document')
    t.equal(await count(app, 'uploads'), 0, 'no upload row')
    t.equal(await count(app, 'knowledge_documents'), 0, 'no document row')
    t.equal(await count(app, 'blobs'), 0, 'no blob row')
    t.same(readdirSync(join(root, '.tmp')), [], 'no partial file left')

    // fill the rest: even a one-byte write fails, and readiness says so
    try {
      writeFileSync(join(root, 'filler-2'), Buffer.alloc(400 * 1024, 1))
    } catch (err) {
      t.equal((err as NodeJS.ErrnoException).code, 'ENOSPC')
    }
    const notReady = await ready(app)
    t.equal(notReady.statusCode, 503)
    t.same(notReady.json(), { error: 'not_ready', message: 'the disk is full: uploads and artifacts cannot be stored' })
    t.equal(notReady.headers['retry-after'], '30')
    t.equal((await app.inject({ method: 'GET', url: '/api/health' })).statusCode, 200, 'liveness is not readiness')

    rmSync(join(root, 'filler'))
    rmSync(join(root, 'filler-2'), { force: true })
    t.equal((await ready(app)).statusCode, 200, 'room again: ready')
    const small = await upload(app, { filename: 'small.txt', type: 'text/plain', bytes: 'fits now' })
    t.equal(small.statusCode, 201)
  }
)

/** The fs store, on a disk whose quota runs out after `room` bytes of a body (EDQUOT). */
class QuotaStore extends FsBlobStore {
  room = Infinity
  override async stage(body: Readable, maxBytes: number): Promise<StagedBlob> {
    if (this.room === Infinity) return super.stage(body, maxBytes)
    let seen = 0
    for await (const chunk of body) {
      seen += (chunk as Buffer).length
      if (seen > this.room) {
        body.destroy()
        throw Object.assign(new Error('EDQUOT: disk quota exceeded, write'), {
          code: 'EDQUOT',
          errno: -122,
          syscall: 'write'
        })
      }
    }
    throw new Error('unreachable in this test')
  }
}

t.test(
  'a used-up quota (EDQUOT) is a full disk too: 507, nothing referenced, ready again after a write succeeds',
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cairn-quota-'))
    t.teardown(() => rmSync(dir, { recursive: true, force: true }))
    const store = new QuotaStore(dir)
    const app = await buildTestApp(t, { blobStore: store, env: { KNOWLEDGE_WORKER: 'false' } })
    store.room = 1000
    checkFull(t, await upload(app, { filename: 'a.bin', bytes: Buffer.alloc(64 * 1024, 3) }), 'an upload')
    checkFull(t, await sendDocument(app, Buffer.alloc(64 * 1024, 65)), 'a document')
    t.equal(await count(app, 'uploads'), 0)
    t.equal(await count(app, 'knowledge_documents'), 0)
    t.equal((await ready(app)).statusCode, 503, 'not ready while writes fail')
    store.room = Infinity
    t.equal((await ready(app)).statusCode, 200, 'ready once a write succeeds')
    t.equal((await upload(app, { filename: 'b.txt', type: 'text/plain', bytes: 'ok' })).statusCode, 201)
  }
)
