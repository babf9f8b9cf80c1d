import { randomUUID } from 'node:crypto'
import { PassThrough, type Readable } from 'node:stream'
import { buffer } from 'node:stream/consumers'
import { pipeline } from 'node:stream/promises'
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  NoSuchKey,
  NotFound,
  S3Client
} from '@aws-sdk/client-s3'
import { Upload } from '@aws-sdk/lib-storage'
import { BlobMissing, blobKey, Meter, type BlobStore, type ByteRange, type StagedBlob } from './blob-store.js'

export interface S3StoreOptions {
  bucket: string
  region: string
  endpoint?: string | undefined
  accessKeyId?: string | undefined
  secretAccessKey?: string | undefined
  forcePathStyle: boolean
}

const TMP_PREFIX = '.tmp/'
/** Multipart part size: a body is sent in parts of this many bytes, so memory stays bounded. */
const PART_SIZE = 8 * 1024 * 1024

const isMissing = (err: unknown) =>
  err instanceof NoSuchKey || err instanceof NotFound || (err as { name?: string }).name === 'NotFound'

/**
 * Blobs in an S3-compatible bucket under `<org>/<sha[0:2]>/<sha>`. A body streams to a
 * temporary key as a multipart upload while it is hashed; commit copies it server-side
 * under its address (CopyObject is atomic: the address names all the bytes or none) and
 * deletes the temporary. This module is loaded only when ARTIFACT_STORE=s3.
 */
export class S3BlobStore implements BlobStore {
  readonly kind = 's3'
  private readonly client: S3Client
  private readonly bucket: string

  constructor(options: S3StoreOptions) {
    this.bucket = options.bucket
    this.client = new S3Client({
      region: options.region,
      forcePathStyle: options.forcePathStyle,
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
      ...(options.accessKeyId && options.secretAccessKey
        ? { credentials: { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey } }
        : {})
    })
  }

  async stage(body: Readable, maxBytes: number): Promise<StagedBlob> {
    const token = randomUUID()
    const meter = new Meter(maxBytes)
    const sent = new PassThrough()
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.bucket, Key: TMP_PREFIX + token, Body: sent },
      partSize: PART_SIZE,
      queueSize: 2
    })
    const uploaded = upload.done()
    try {
      await pipeline(body, meter, sent)
      await uploaded
    } catch (err) {
      await upload.abort().catch(() => {})
      await uploaded.catch(() => {})
      await this.deleteKey(TMP_PREFIX + token)
      throw err
    }
    return meter.result(token)
  }

  async commit(orgId: string, staged: StagedBlob): Promise<void> {
    const key = blobKey(orgId, staged.sha256)
    const there = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key })).then(
      () => true,
      (err: unknown) => {
        if (isMissing(err)) return false
        throw err
      }
    )
    if (!there) {
      await this.client.send(
        new CopyObjectCommand({
          Bucket: this.bucket,
          Key: key,
          CopySource: `${this.bucket}/${(TMP_PREFIX + staged.token).split('/').map(encodeURIComponent).join('/')}`
        })
      )
    }
    await this.deleteKey(TMP_PREFIX + staged.token)
  }

  async discard(staged: StagedBlob): Promise<void> {
    await this.deleteKey(TMP_PREFIX + staged.token)
  }

  async read(orgId: string, sha256: string, range?: ByteRange): Promise<Readable> {
    try {
      const answer = await this.client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: blobKey(orgId, sha256),
          ...(range ? { Range: `bytes=${range.start}-${range.end}` } : {})
        })
      )
      return answer.Body as Readable
    } catch (err) {
      if (isMissing(err)) throw new BlobMissing(`blob ${sha256} of org ${orgId} is missing`)
      throw err
    }
  }

  async readBytes(orgId: string, sha256: string, range?: ByteRange): Promise<Buffer> {
    return buffer(await this.read(orgId, sha256, range))
  }

  async remove(orgId: string, sha256: string): Promise<void> {
    await this.deleteKey(blobKey(orgId, sha256))
  }

  async cleanTemporaries(ageMs: number): Promise<number> {
    const cutoff = Date.now() - ageMs
    let removed = 0
    let token: string | undefined
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: TMP_PREFIX, ContinuationToken: token })
      )
      for (const object of page.Contents ?? []) {
        if (object.Key && object.LastModified && object.LastModified.getTime() < cutoff) {
          await this.deleteKey(object.Key)
          removed++
        }
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined
    } while (token)
    return removed
  }

  private async deleteKey(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key })).catch((err: unknown) => {
      if (!isMissing(err)) throw err
    })
  }

  close(): void {
    this.client.destroy()
  }
}
