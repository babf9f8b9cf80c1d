import { join } from 'node:path'
import { Readable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { filesDir, type Config } from '../config.js'
import type { RunArtifacts } from '../runs/ports/artifacts.js'
import { getUpload, saveRunArtifact, uploadsAmong } from './artifacts-repo.js'
import { BlobMissing, FsBlobStore, type BlobStore } from './blob-store.js'
import { BlobSweeper, putBlob, referenceBlob } from './blobs.js'
import type { WorkspaceArchives } from '../runtime/ports.js'
import { WatchedBlobStore } from './storage-health.js'

/** The artifacts group's instance-wide side, as `app.artifacts`. */
export interface ArtifactsService {
  /** where the bytes live (ARTIFACT_STORE), watched for a full disk (readiness) */
  store: WatchedBlobStore
  /** removes blobs nothing references */
  sweeper: BlobSweeper
  /** UPLOAD_MAX_BYTES: the largest upload or content write */
  maxBytes: number
  /** the runs group's port: what a run saves */
  forRuns: RunArtifacts
  /** the runtime's port: thread workspace archives, blobs like any other */
  forWorkspaces: WorkspaceArchives
  /** every version is kept byte for byte (GET /api/config) */
  readonly fidelity: 'full'
}

declare module 'fastify' {
  interface FastifyInstance {
    artifacts: ArtifactsService
  }
}

/** The variables `createBlobStore` reads. */
export type BlobStoreConfig = Pick<
  Config,
  | 'ARTIFACT_STORE'
  | 'DATA_DIR'
  | 'S3_BUCKET'
  | 'S3_REGION'
  | 'S3_ENDPOINT'
  | 'S3_ACCESS_KEY_ID'
  | 'S3_SECRET_ACCESS_KEY'
  | 'S3_FORCE_PATH_STYLE'
>

/** The variables the artifacts service reads (its store's among them): a read of another is a type error. */
export type ArtifactsConfig = BlobStoreConfig & Pick<Config, 'BLOB_SWEEP_MS' | 'UPLOAD_MAX_BYTES'>

export interface ArtifactsServiceOptions {
  config: ArtifactsConfig
  /** replaces the store ARTIFACT_STORE would choose (tests) */
  store?: BlobStore | undefined
}

/** The store ARTIFACT_STORE names; the S3 client is loaded only when it is chosen. */
export async function createBlobStore(config: BlobStoreConfig): Promise<BlobStore> {
  if (config.ARTIFACT_STORE === 'fs') return new FsBlobStore(join(filesDir(config), 'blobs'))
  const { S3BlobStore } = await import('./s3-store.js')
  return new S3BlobStore({
    bucket: config.S3_BUCKET!,
    region: config.S3_REGION,
    endpoint: config.S3_ENDPOINT,
    accessKeyId: config.S3_ACCESS_KEY_ID,
    secretAccessKey: config.S3_SECRET_ACCESS_KEY,
    forcePathStyle: config.S3_FORCE_PATH_STYLE
  })
}

/**
 * A name a run gave (a prompt line, a tool argument) made safe to store: no control characters, at most 255 characters.
 */
export function cleanName(name: string): string {
  // eslint-disable-next-line no-control-regex
  const clean = name.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim()
  return [...clean].slice(0, 255).join('') || 'untitled'
}

/**
 * The artifacts service: the blob store, its sweeper (started with the app, stopped
 * before the database closes) and the port runs save through.
 */
export default fp(
  async function artifactsService(app: FastifyInstance, opts: ArtifactsServiceOptions) {
    const { config } = opts
    const store = new WatchedBlobStore(opts.store ?? (await createBlobStore(config)))
    const sweeper = new BlobSweeper({
      db: app.db,
      store,
      log: app.log.child({ component: 'blob-sweeper' }),
      everyMs: config.BLOB_SWEEP_MS
    })
    const forRuns: RunArtifacts = {
      async save(run, file) {
        const blob = await putBlob(
          app.db,
          store,
          run.orgId,
          Readable.from([Buffer.from(file.content, 'utf8')]),
          config.UPLOAD_MAX_BYTES
        )
        const artifact = await saveRunArtifact(app.db, run, cleanName(file.name), {
          blob,
          contentType: file.contentType
        })
        return { artifactId: artifact.id, name: artifact.name, version: artifact.version }
      },
      async uploadsOf(orgId, ids) {
        const rows = new Map((await uploadsAmong(app.db, orgId, ids)).map((u) => [u.id, u]))
        return ids.flatMap((id) => {
          const u = rows.get(id)
          return u ? [{ id: u.id, name: u.name, contentType: u.contentType, size: Number(u.size) }] : []
        })
      },
      async readUpload(orgId, id) {
        const upload = await getUpload(app.db, orgId, id)
        if (!upload) return null
        try {
          return await store.readBytes(orgId, upload.sha256)
        } catch (err) {
          if (err instanceof BlobMissing) return null
          throw err
        }
      }
    }
    const forWorkspaces: WorkspaceArchives = {
      async put(orgId, body, maxBytes) {
        const blob = await putBlob(app.db, store, orgId, body, maxBytes)
        return { sha256: blob.sha256, size: blob.size }
      },
      reference: referenceBlob,
      read: (orgId, sha256) => store.read(orgId, sha256)
    }
    app.decorate('artifacts', {
      store,
      sweeper,
      maxBytes: config.UPLOAD_MAX_BYTES,
      forRuns,
      forWorkspaces,
      fidelity: 'full'
    } satisfies ArtifactsService)
    app.addHook('onReady', async () => {
      sweeper.start()
    })
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the blob sweeper', (ms) => sweeper.stop(ms))
    })
    app.addHook('onClose', async () => {
      ;(store as { close?: () => void }).close?.()
    })
  },
  { name: 'artifacts', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
