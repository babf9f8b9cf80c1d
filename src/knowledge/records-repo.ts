import { and, arrayContains, eq, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import { vocabulary } from '../retrieval/words.js'
import { bumpGeneration } from './generation.js'
import {
  knowledgeRecordHistory,
  knowledgeRecords,
  knowledgeWords,
  type HistoryKind,
  type RecordSource
} from './tables.js'

export type HistoryRow = typeof knowledgeRecordHistory.$inferSelect

export function recordToWire(r: RecordRow) {
  return {
    id: r.id,
    title: r.title,
    body: r.body,
    tags: r.tags,
    source: r.source,
    version: r.version,
    createdAt: isoOf(r.createdAt),
    updatedAt: isoOf(r.updatedAt),
    createdBy: r.createdBy
  }
}

export function historyToWire(h: HistoryRow) {
  return {
    version: h.version,
    title: h.title,
    body: h.body,
    changedBy: h.changedBy,
    changedAt: isoOf(h.changedAt),
    kind: h.kind
  }
}

/** The columns every read selects: the search vector and the embedding job's flag stay in the database. */
const recordColumns = {
  id: knowledgeRecords.id,
  orgId: knowledgeRecords.orgId,
  title: knowledgeRecords.title,
  body: knowledgeRecords.body,
  tags: knowledgeRecords.tags,
  source: knowledgeRecords.source,
  version: knowledgeRecords.version,
  createdAt: knowledgeRecords.createdAt,
  updatedAt: knowledgeRecords.updatedAt,
  createdBy: knowledgeRecords.createdBy
}
/** A record as it is read (without its search vector or the embedding job's flag). */
export type RecordRow = Omit<typeof knowledgeRecords.$inferSelect, 'searchVector' | 'embeddingQueued'>

const WORDS_PER_STATEMENT = 5000

/** Adds the words of new text to the org's vocabulary (the typo fallback of search). */
export async function addWords(tx: Db | Tx, orgId: string, texts: string[]): Promise<void> {
  const words = vocabulary(...texts)
  for (let i = 0; i < words.length; i += WORDS_PER_STATEMENT) {
    await tx.execute(sql`
      insert into ${knowledgeWords} (org_id, word)
      select ${orgId}, w from jsonb_array_elements_text(${JSON.stringify(words.slice(i, i + WORDS_PER_STATEMENT))}::jsonb) as w
      order by w
      on conflict do nothing`)
  }
}

async function addHistory(tx: Tx, r: RecordRow, kind: HistoryKind, changedBy: string | null): Promise<void> {
  await tx.execute(sql`
    insert into ${knowledgeRecordHistory} (org_id, record_id, seq, version, title, body, kind, changed_by)
    values (${r.orgId}, ${r.id},
      (select coalesce(max(seq), 0) + 1 from ${knowledgeRecordHistory} where org_id = ${r.orgId} and record_id = ${r.id}),
      ${r.version}, ${r.title}, ${r.body}, ${kind}, ${changedBy})`)
}

export interface NewRecord {
  title: string
  body: string
  tags: string[]
  source: RecordSource
  createdBy: string | null
}

/** A new record at version 1, its history's first entry and its words, in the caller's transaction. */
export async function insertRecord(tx: Tx, orgId: string, input: NewRecord): Promise<RecordRow> {
  const [record] = await tx
    .insert(knowledgeRecords)
    .values({
      id: newId(),
      orgId,
      title: input.title,
      body: input.body,
      tags: input.tags,
      source: input.source,
      version: 1,
      createdBy: input.createdBy
    })
    .returning(recordColumns)
  await addHistory(tx, record!, 'created', input.createdBy)
  await addWords(tx, orgId, [input.title, input.body, ...input.tags])
  await bumpGeneration(tx, orgId)
  return record!
}

export async function createRecord(db: Db, orgId: string, input: NewRecord): Promise<RecordRow> {
  return db.transaction((tx) => insertRecord(tx, orgId, input))
}

export async function getRecord(db: Db | Tx, orgId: string, id: string): Promise<RecordRow | null> {
  const [row] = await db
    .select(recordColumns)
    .from(knowledgeRecords)
    .where(and(eq(knowledgeRecords.orgId, orgId), eq(knowledgeRecords.id, id)))
  return row ?? null
}

export async function listRecords(
  db: Db,
  orgId: string,
  q: { tag?: string | undefined; limit: number; cursor: string | undefined }
) {
  const list = keyset(knowledgeRecords.id, 'desc', q)
  const rows = await db
    .select(recordColumns)
    .from(knowledgeRecords)
    .where(
      and(
        eq(knowledgeRecords.orgId, orgId),
        q.tag !== undefined ? arrayContains(knowledgeRecords.tags, [q.tag]) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

export interface RecordChange {
  title?: string | undefined
  body?: string | undefined
  tags?: string[] | undefined
  /** set by the server only (a repo wiki page moving to a new commit), never by a PATCH */
  source?: RecordSource | undefined
}

/**
 * A new version of a record when `version` is its current one, in the caller's
 * transaction: 'missing' when it is not in the org, 'stale' when it moved on (nothing
 * changes in either case).
 */
export async function reviseRecord(
  tx: Tx,
  orgId: string,
  id: string,
  change: RecordChange,
  version: number | null,
  changedBy: string | null
): Promise<RecordRow | 'missing' | 'stale'> {
  const [record] = await tx
    .update(knowledgeRecords)
    .set({
      ...(change.title !== undefined ? { title: change.title } : {}),
      ...(change.body !== undefined ? { body: change.body } : {}),
      ...(change.tags !== undefined ? { tags: change.tags } : {}),
      ...(change.source !== undefined ? { source: change.source } : {}),
      version: sql`${knowledgeRecords.version} + 1`,
      updatedAt: sql`greatest(now(), ${knowledgeRecords.updatedAt})`
    })
    .where(
      and(
        eq(knowledgeRecords.orgId, orgId),
        eq(knowledgeRecords.id, id),
        version !== null ? eq(knowledgeRecords.version, version) : undefined
      )
    )
    .returning(recordColumns)
  if (!record) return (await getRecord(tx, orgId, id)) ? 'stale' : 'missing'
  await addHistory(tx, record, 'updated', changedBy)
  await addWords(tx, orgId, [change.title ?? '', change.body ?? '', ...(change.tags ?? [])])
  await bumpGeneration(tx, orgId)
  return record
}

export async function updateRecord(
  db: Db,
  orgId: string,
  id: string,
  change: RecordChange,
  version: number,
  changedBy: string | null
) {
  return db.transaction((tx) => reviseRecord(tx, orgId, id, change, version, changedBy))
}

/** Deletes a record; its history stays, ending with a `deleted` entry. False when it is not in the org. */
export async function deleteRecord(db: Db, orgId: string, id: string, changedBy: string | null): Promise<boolean> {
  return db.transaction((tx) => removeRecord(tx, orgId, id, changedBy))
}

/** `deleteRecord` in the caller's transaction. */
export async function removeRecord(tx: Tx, orgId: string, id: string, changedBy: string | null): Promise<boolean> {
  const [gone] = await tx
    .delete(knowledgeRecords)
    .where(and(eq(knowledgeRecords.orgId, orgId), eq(knowledgeRecords.id, id)))
    .returning(recordColumns)
  if (!gone) return false
  await addHistory(tx, gone, 'deleted', changedBy)
  await bumpGeneration(tx, orgId)
  return true
}

/** A record's history, oldest first; null when the org never had it. */
export async function recordHistory(db: Db, orgId: string, id: string): Promise<HistoryRow[] | null> {
  const rows = await db
    .select()
    .from(knowledgeRecordHistory)
    .where(and(eq(knowledgeRecordHistory.orgId, orgId), eq(knowledgeRecordHistory.recordId, id)))
    .orderBy(knowledgeRecordHistory.seq)
  return rows.length > 0 ? rows : null
}
