import type { Readable } from 'node:stream'
import { sql } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import type { BlobStore, StagedBlob } from './blob-store.js'
import { createWorkerLoop, type WorkerLoop } from '../worker-loop.js'

/**
 * How long a writer's pin keeps a blob from the sweeper: from before its bytes are under
 * their address until well after its referencing row has committed.
 */
export const PIN_MS = 15 * 60 * 1000
/** Temporaries older than this are leftovers of crashed writes. */
const TEMPORARY_MAX_AGE_MS = 60 * 60 * 1000

export type StoredBlob = Omit<StagedBlob, 'token'>

/**
 * Streams a body into the org's blobs and returns its address. Nothing of a body over
 * `maxBytes` is kept (BlobTooLarge). The blob row is pinned before the bytes go under their
 * address, so the sweeper leaves them alone until the caller's row references them
 * (`referenceBlob` in that row's transaction).
 */
export async function putBlob(
  db: Db,
  store: BlobStore,
  orgId: string,
  body: Readable,
  maxBytes: number
): Promise<StoredBlob> {
  const staged = await store.stage(body, maxBytes)
  try {
    await db.execute(sql`
      insert into blobs (org_id, sha256, size, pinned_until)
      values (${orgId}, ${staged.sha256}, ${staged.size}, now() + make_interval(secs => ${PIN_MS / 1000}))
      on conflict (org_id, sha256) do update set pinned_until = greatest(blobs.pinned_until, excluded.pinned_until)`)
    await store.commit(orgId, staged)
  } catch (err) {
    await store.discard(staged).catch(() => {})
    throw err
  }
  return { sha256: staged.sha256, size: staged.size, head: staged.head }
}

/**
 * Called in the transaction that writes a row naming the blob: holds the blob row (share
 * lock) so a sweep cannot remove it before that row commits. Throws if it is gone (a
 * write that outlived its pin; never in practice).
 */
export async function referenceBlob(tx: Tx, orgId: string, sha256: string): Promise<void> {
  const rows = rowsOf(
    await tx.execute(sql`select 1 from blobs where org_id = ${orgId} and sha256 = ${sha256} for share`)
  )
  if (rows.length === 0) throw new Error(`blob ${sha256} was swept before it was referenced`)
}

export interface BlobSweeperOptions {
  db: Db
  store: BlobStore
  log: FastifyBaseLogger
  everyMs: number
}

/**
 * Removes blobs nothing references (uploads, artifact versions and proposals, knowledge
 * documents, thread workspace archives) once their pin has passed. Each round locks its
 * candidates (`FOR UPDATE SKIP LOCKED`, so instances share the work) and removes the
 * bytes before the row, inside that lock: a writer pinning the same address waits for the
 * round and then writes the bytes again. A round that dies leaves rows whose bytes may be
 * gone; nothing references them, and the next round finishes them.
 */
export class BlobSweeper {
  private readonly o: BlobSweeperOptions
  private readonly loop: WorkerLoop<never>

  constructor(options: BlobSweeperOptions) {
    this.o = options
    this.loop = createWorkerLoop<never>({
      name: 'blob sweeper',
      log: options.log,
      pollMs: options.everyMs,
      every: [
        {
          everyMs: options.everyMs,
          job: () => this.sweep().catch((err: unknown) => this.o.log.warn({ err }, 'blob sweep failed'))
        }
      ]
    })
  }

  start(): void {
    this.loop.start()
    this.loop.track(
      this.o.store
        .cleanTemporaries(TEMPORARY_MAX_AGE_MS)
        .catch((err: unknown) => this.o.log.warn({ err }, 'removing leftover blob temporaries failed'))
    )
  }

  /**
   * Nothing new starts; waits for the round in flight, at most `deadlineMs` (a round cut short is finished by the
   * next).
   */
  async stop(deadlineMs?: number): Promise<void> {
    await this.loop.stop(deadlineMs)
  }

  /** One round (up to 100 blobs); returns how many were removed. */
  async sweep(): Promise<number> {
    const { db, store } = this.o
    return db.transaction(async (tx) => {
      const gone = rowsOf<{ org_id: string; sha256: string }>(
        await tx.execute(sql`
        select org_id, sha256 from blobs b
        where pinned_until < now()
          and not exists (select 1 from uploads u where u.org_id = b.org_id and u.sha256 = b.sha256)
          and not exists (select 1 from artifact_versions v where v.org_id = b.org_id and v.sha256 = b.sha256)
          and not exists (select 1 from artifact_proposals p where p.org_id = b.org_id and p.sha256 = b.sha256)
          and not exists (select 1 from knowledge_documents k where k.org_id = b.org_id and k.sha256 = b.sha256)
          and not exists (select 1 from thread_workspaces w where w.org_id = b.org_id and w.sha256 = b.sha256)
        order by pinned_until limit 100
        for update skip locked`)
      )
      for (const blob of gone) {
        await store.remove(blob.org_id, blob.sha256)
        await tx.execute(sql`delete from blobs where org_id = ${blob.org_id} and sha256 = ${blob.sha256}`)
      }
      return gone.length
    })
  }
}
