import { and, asc, eq, sql } from 'drizzle-orm'
import type { StoredBlob } from '../artifacts/blobs.js'
import { referenceBlob } from '../artifacts/blobs.js'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import { bumpGeneration } from './generation.js'
import { knowledgeChunks, knowledgeDocuments, type DocumentState } from './tables.js'

export type DocumentRow = typeof knowledgeDocuments.$inferSelect

export function documentToWire(d: DocumentRow) {
  return {
    id: d.id,
    name: d.name,
    contentType: d.contentType,
    size: d.size,
    sha256: d.sha256,
    state: d.state,
    chunkCount: d.chunkCount,
    attempts: d.attempts,
    lastError: d.lastError,
    nextAttemptAt: isoOf(d.nextAttemptAt),
    createdAt: isoOf(d.createdAt),
    updatedAt: isoOf(d.updatedAt)
  }
}

export async function createDocument(
  db: Db,
  row: {
    orgId: string
    name: string
    kind: string
    contentType: string
    blob: StoredBlob
    maxAttempts: number
    createdBy: string | null
  }
): Promise<DocumentRow> {
  return db.transaction(async (tx) => {
    await referenceBlob(tx, row.orgId, row.blob.sha256)
    const [document] = await tx
      .insert(knowledgeDocuments)
      .values({
        id: newId(),
        orgId: row.orgId,
        name: row.name,
        kind: row.kind,
        contentType: row.contentType,
        size: row.blob.size,
        sha256: row.blob.sha256,
        maxAttempts: row.maxAttempts,
        createdBy: row.createdBy
      })
      .returning()
    return document!
  })
}

export async function getDocument(db: Db, orgId: string, id: string): Promise<DocumentRow | null> {
  const [row] = await db
    .select()
    .from(knowledgeDocuments)
    .where(and(eq(knowledgeDocuments.orgId, orgId), eq(knowledgeDocuments.id, id)))
  return row ?? null
}

export async function listDocuments(
  db: Db,
  orgId: string,
  q: { state?: DocumentState | undefined; limit: number; cursor: string | undefined }
) {
  const list = keyset(knowledgeDocuments.id, 'desc', q)
  const rows = await db
    .select()
    .from(knowledgeDocuments)
    .where(
      and(
        eq(knowledgeDocuments.orgId, orgId),
        q.state !== undefined ? eq(knowledgeDocuments.state, q.state) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/** The chunks of a document in order; the caller has checked the document is the org's. */
export async function documentChunks(db: Db, orgId: string, documentId: string) {
  return db
    .select({ index: knowledgeChunks.idx, heading: knowledgeChunks.heading, text: knowledgeChunks.text })
    .from(knowledgeChunks)
    .where(and(eq(knowledgeChunks.orgId, orgId), eq(knowledgeChunks.documentId, documentId)))
    .orderBy(asc(knowledgeChunks.idx))
}

/** Deletes a document and its chunks (its blob goes with the next sweep when nothing else names it). */
export async function deleteDocument(db: Db, orgId: string, id: string): Promise<boolean> {
  return db.transaction(async (tx) => {
    const gone = await tx
      .delete(knowledgeDocuments)
      .where(and(eq(knowledgeDocuments.orgId, orgId), eq(knowledgeDocuments.id, id)))
      .returning({ id: knowledgeDocuments.id })
    if (gone.length === 0) return false
    // its chunks went with it
    await bumpGeneration(tx, orgId)
    return true
  })
}

/**
 * A document's retry: a failed document goes back to the queue with a fresh budget of
 * attempts. 'missing' when it is not in the org, 'not-failed' when it is in any other state.
 */
export async function retryDocument(
  db: Db,
  orgId: string,
  id: string
): Promise<DocumentRow | 'missing' | 'not-failed'> {
  const [row] = await db
    .update(knowledgeDocuments)
    .set({
      state: 'queued',
      attempts: 0,
      leaseOwner: null,
      leaseExpiresAt: null,
      nextAttemptAt: sql`now()`,
      updatedAt: sql`now()`
    })
    .where(
      and(eq(knowledgeDocuments.orgId, orgId), eq(knowledgeDocuments.id, id), eq(knowledgeDocuments.state, 'failed'))
    )
    .returning()
  if (row) return row
  return (await getDocument(db, orgId, id)) ? 'not-failed' : 'missing'
}
