import { Readable } from 'node:stream'
import { isDiskFull } from '../db/faults.js'
import type { BlobStore, ByteRange, StagedBlob } from './blob-store.js'

/**
 * A blob store that remembers whether the disk was full at its last write (ENOSPC, EDQUOT):
 * readiness answers 503 from then until a write succeeds again. While it is full, the
 * readiness check itself tries a one-byte write (staged and dropped at once), so an
 * instance that takes no traffic still finds out that room was made.
 */
export class WatchedBlobStore implements BlobStore {
  readonly kind: BlobStore['kind']
  private readonly inner: BlobStore
  /** when a write last found the disk full; null while writes succeed */
  fullSince: Date | null = null

  constructor(inner: BlobStore) {
    this.inner = inner
    this.kind = inner.kind
  }

  private watch<T>(work: Promise<T>): Promise<T> {
    return work.then(
      (value) => {
        this.fullSince = null
        return value
      },
      (err: unknown) => {
        if (isDiskFull(err)) this.fullSince ??= new Date()
        throw err
      }
    )
  }

  /** True when there is room again (or never was a problem); a write is tried only while the disk was full. */
  async hasRoom(): Promise<boolean> {
    if (this.fullSince === null) return true
    try {
      const staged = await this.watch(this.inner.stage(Readable.from([Buffer.from('.')]), 1))
      await this.inner.discard(staged).catch(() => {})
    } catch {
      // still full, or failing otherwise: readiness says so
    }
    return this.fullSince === null
  }

  stage(body: Readable, maxBytes: number): Promise<StagedBlob> {
    // a body over its limit or cut short says nothing of the disk: only a disk-full failure counts
    return this.inner.stage(body, maxBytes).catch((err: unknown) => {
      if (isDiskFull(err)) this.fullSince ??= new Date()
      throw err
    })
  }

  commit(orgId: string, staged: StagedBlob): Promise<void> {
    return this.watch(this.inner.commit(orgId, staged))
  }

  discard(staged: StagedBlob): Promise<void> {
    return this.inner.discard(staged)
  }

  read(orgId: string, sha256: string, range?: ByteRange): Promise<Readable> {
    return this.inner.read(orgId, sha256, range)
  }

  readBytes(orgId: string, sha256: string, range?: ByteRange): Promise<Buffer> {
    return this.inner.readBytes(orgId, sha256, range)
  }

  remove(orgId: string, sha256: string): Promise<void> {
    return this.inner.remove(orgId, sha256)
  }

  cleanTemporaries(ageMs: number): Promise<number> {
    return this.inner.cleanTemporaries(ageMs)
  }

  /** the S3 store's client, closed with the app */
  close(): void {
    ;(this.inner as { close?: () => void }).close?.()
  }
}
