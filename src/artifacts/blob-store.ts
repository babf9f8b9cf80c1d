import { createHash, randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { createWriteStream } from 'node:fs'
import { mkdir, open, readdir, rename, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { Transform, type Readable, type TransformCallback } from 'node:stream'
import { pipeline } from 'node:stream/promises'

/** How many leading bytes are kept for content sniffing (file-type reads at most this many). */
export const HEAD_BYTES = 4100

/** A body past the size limit: nothing of it is kept. */
export class BlobTooLarge extends Error {
  override name = 'BlobTooLarge'
  readonly limit: number
  constructor(limit: number) {
    super(`the content is larger than ${limit} bytes`)
    this.limit = limit
  }
}

/** Bytes a row names that the store does not have (never expected: a row outlived its blob). */
export class BlobMissing extends Error {
  override name = 'BlobMissing'
}

/** A body written to a temporary place, hashed: not yet under its address. */
export interface StagedBlob {
  sha256: string
  size: number
  /** the first HEAD_BYTES bytes, for sniffing */
  head: Buffer
  /** the store's name for the temporary */
  token: string
}

export interface ByteRange {
  start: number
  /** inclusive */
  end: number
}

/**
 * Where blob bytes live, addressed by (org, SHA-256). Bodies stream through: `stage`
 * writes to a temporary while hashing, `commit` puts the bytes under their address in
 * one atomic step, so a crash never leaves a partial blob under a content address.
 */
export interface BlobStore {
  readonly kind: 'fs' | 's3'
  /** Streams a body to a temporary, hashing and counting; past `maxBytes` throws BlobTooLarge and keeps nothing. */
  stage(body: Readable, maxBytes: number): Promise<StagedBlob>
  /** Puts a staged blob under its address in the org (the same bytes may be there already) and drops the temporary. */
  commit(orgId: string, staged: StagedBlob): Promise<void>
  /** Drops a staged blob that will not be committed. */
  discard(staged: StagedBlob): Promise<void>
  /** The bytes (or a range of them) as a stream; throws BlobMissing when there are none. */
  read(orgId: string, sha256: string, range?: ByteRange): Promise<Readable>
  /** The same, whole in memory: for small contents, where a stream costs more than the bytes. */
  readBytes(orgId: string, sha256: string, range?: ByteRange): Promise<Buffer>
  /** Removes a blob; removing one that is not there is not an error. */
  remove(orgId: string, sha256: string): Promise<void>
  /** Removes temporaries older than `ageMs` (left by writes that crashed); returns how many. */
  cleanTemporaries(ageMs: number): Promise<number>
}

const SAFE_ORG = /^[A-Za-z0-9_-]{1,64}$/
const SHA256 = /^[0-9a-f]{64}$/

/** The address of a blob, checked so no id can name a path outside the store. */
export function blobKey(orgId: string, sha256: string): string {
  if (!SAFE_ORG.test(orgId) || !SHA256.test(sha256)) throw new Error('invalid blob address')
  return `${orgId}/${sha256.slice(0, 2)}/${sha256}`
}

/**
 * A pass-through that hashes, counts and keeps the head of what flows through it, and
 * fails the stream once more than `maxBytes` went by.
 */
export class Meter extends Transform {
  private readonly hash = createHash('sha256')
  private readonly headChunks: Buffer[] = []
  private headLength = 0
  private readonly maxBytes: number
  size = 0

  constructor(maxBytes: number) {
    super()
    this.maxBytes = maxBytes
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.size += chunk.length
    if (this.size > this.maxBytes) {
      callback(new BlobTooLarge(this.maxBytes))
      return
    }
    this.hash.update(chunk)
    if (this.headLength < HEAD_BYTES) {
      const part = chunk.subarray(0, HEAD_BYTES - this.headLength)
      this.headChunks.push(part)
      this.headLength += part.length
    }
    callback(null, chunk)
  }

  result(token: string): StagedBlob {
    return { sha256: this.hash.digest('hex'), size: this.size, head: Buffer.concat(this.headChunks), token }
  }
}

const ignoreMissing = (err: unknown) => {
  if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
}

/** Blobs as files under a directory (`DATA_DIR/blobs`); temporaries in its `.tmp`. */
export class FsBlobStore implements BlobStore {
  readonly kind = 'fs'
  private readonly root: string
  private readonly tmp: string

  constructor(root: string) {
    // a URL (DATA_DIR=memory://, a database URL) is no directory: joined as a path it would
    // make a folder named `memory:` in the working directory; filesDir() gives such a
    // DATA_DIR a temporary directory instead
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(root))
      throw new Error(`the blob store needs a directory, not a URL: ${root.split('//')[0]}//…`)
    this.root = root
    this.tmp = join(root, '.tmp')
  }

  async stage(body: Readable, maxBytes: number): Promise<StagedBlob> {
    await mkdir(this.tmp, { recursive: true })
    const token = randomUUID()
    const path = join(this.tmp, token)
    const meter = new Meter(maxBytes)
    // flush: the bytes reach the disk before the rename makes them the blob
    const file = createWriteStream(path, { flags: 'wx', flush: true })
    try {
      await pipeline(body, meter, file)
    } catch (err) {
      // a file stream destroyed before it opened still creates the file: wait for it to close
      if (!file.closed) await once(file, 'close').catch(() => {})
      await unlink(path).catch(ignoreMissing)
      throw err
    }
    return meter.result(token)
  }

  async commit(orgId: string, staged: StagedBlob): Promise<void> {
    const final = join(this.root, blobKey(orgId, staged.sha256))
    await mkdir(join(final, '..'), { recursive: true })
    // atomic: the address names either nothing or every byte (same bytes: replacing is harmless)
    await rename(join(this.tmp, staged.token), final)
  }

  async discard(staged: StagedBlob): Promise<void> {
    await unlink(join(this.tmp, staged.token)).catch(ignoreMissing)
  }

  private async open(orgId: string, sha256: string) {
    try {
      return await open(join(this.root, blobKey(orgId, sha256)), 'r')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT')
        throw new BlobMissing(`blob ${sha256} of org ${orgId} is missing`)
      throw err
    }
  }

  async read(orgId: string, sha256: string, range?: ByteRange): Promise<Readable> {
    const handle = await this.open(orgId, sha256)
    return handle.createReadStream(range ? { start: range.start, end: range.end } : {})
  }

  async readBytes(orgId: string, sha256: string, range?: ByteRange): Promise<Buffer> {
    const handle = await this.open(orgId, sha256)
    try {
      if (!range) return await handle.readFile()
      const bytes = Buffer.allocUnsafe(range.end - range.start + 1)
      const { bytesRead } = await handle.read(bytes, 0, bytes.length, range.start)
      return bytes.subarray(0, bytesRead)
    } finally {
      await handle.close()
    }
  }

  async remove(orgId: string, sha256: string): Promise<void> {
    await unlink(join(this.root, blobKey(orgId, sha256))).catch(ignoreMissing)
  }

  async cleanTemporaries(ageMs: number): Promise<number> {
    let names: string[]
    try {
      names = await readdir(this.tmp)
    } catch (err) {
      ignoreMissing(err)
      return 0
    }
    let removed = 0
    const cutoff = Date.now() - ageMs
    for (const name of names) {
      const path = join(this.tmp, name)
      const info = await stat(path).catch(() => null)
      if (info && info.mtimeMs < cutoff) {
        await unlink(path).catch(ignoreMissing)
        removed++
      }
    }
    return removed
  }
}
