import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { CreateBucketCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3'
import S3rver from 's3rver'
import { S3BlobStore } from '../../src/artifacts/s3-store.js'
import type { Teardown } from '../helper.js'

export interface LocalS3 {
  endpoint: string
  bucket: string
  store: S3BlobStore
  /** every key in the bucket */
  keys(prefix?: string): Promise<string[]>
}

const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' }

/**
 * A real S3-protocol server on a free local port (s3rver, from npm), with a fresh bucket,
 * closed at teardown. Null, with the reason, when it cannot start.
 */
export async function startLocalS3(t: Teardown): Promise<LocalS3 | { skip: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-s3-'))
  const server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true })
  let port: number
  try {
    ;({ port } = await server.run())
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    return { skip: `the local S3 server (s3rver) did not start: ${(err as Error).message}` }
  }
  t.teardown(async () => {
    await server.close()
    rmSync(dir, { recursive: true, force: true })
  })
  const endpoint = `http://127.0.0.1:${port}`
  const bucket = 'cairn-test'
  const client = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials: CREDENTIALS })
  t.teardown(() => client.destroy())
  await client.send(new CreateBucketCommand({ Bucket: bucket }))
  const store = new S3BlobStore({ bucket, region: 'us-east-1', endpoint, forcePathStyle: true, ...CREDENTIALS })
  t.teardown(() => store.close())
  return {
    endpoint,
    bucket,
    store,
    async keys(prefix) {
      const listed = await client.send(
        new ListObjectsV2Command({ Bucket: bucket, ...(prefix ? { Prefix: prefix } : {}) })
      )
      return (listed.Contents ?? []).map((o) => o.Key!).sort()
    }
  }
}
