import { and, eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { insertRecord, reviseRecord, type RecordChange } from './records-repo.js'
import { knowledgeDrafts, type DraftState } from './tables.js'

export type DraftRow = typeof knowledgeDrafts.$inferSelect

export function draftToWire(d: DraftRow) {
  return {
    id: d.id,
    title: d.title,
    body: d.body,
    tags: d.tags,
    targetRecordId: d.targetRecordId,
    state: d.state,
    runId: d.runId,
    createdAt: isoOf(d.createdAt),
    createdBy: d.createdBy,
    decidedAt: isoOrNull(d.decidedAt),
    decidedBy: d.decidedBy
  }
}

export interface NewDraft {
  title: string
  body: string
  tags: string[]
  targetRecordId: string | null
  runId: string | null
  createdBy: string | null
}

export async function createDraft(db: Db, orgId: string, input: NewDraft): Promise<DraftRow> {
  const [draft] = await db
    .insert(knowledgeDrafts)
    .values({ id: newId(), orgId, ...input })
    .returning()
  return draft!
}

export async function getDraft(db: Db, orgId: string, id: string): Promise<DraftRow | null> {
  const [row] = await db
    .select()
    .from(knowledgeDrafts)
    .where(and(eq(knowledgeDrafts.orgId, orgId), eq(knowledgeDrafts.id, id)))
  return row ?? null
}

export async function listDrafts(
  db: Db,
  orgId: string,
  q: { state?: DraftState | undefined; limit: number; cursor: string | undefined }
) {
  const list = keyset(knowledgeDrafts.id, 'desc', q)
  const rows = await db
    .select()
    .from(knowledgeDrafts)
    .where(
      and(
        eq(knowledgeDrafts.orgId, orgId),
        q.state !== undefined ? eq(knowledgeDrafts.state, q.state) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/**
 * Approves an open draft in one transaction: a new record (source `draft`), or a new
 * version of its target record; the person's edits (`change`) win over the draft's text.
 * Nothing changes when the draft is not open or its target record was deleted.
 */
export async function approveDraft(db: Db, orgId: string, id: string, change: RecordChange, decidedBy: string | null) {
  return db.transaction(async (tx) => {
    const [draft] = await tx
      .select()
      .from(knowledgeDrafts)
      .where(and(eq(knowledgeDrafts.orgId, orgId), eq(knowledgeDrafts.id, id)))
      .for('update')
    if (!draft) return 'missing' as const
    if (draft.state !== 'open') return 'not-open' as const
    const title = change.title ?? draft.title
    const body = change.body ?? draft.body
    const tags = change.tags ?? draft.tags
    const record =
      draft.targetRecordId === null
        ? await insertRecord(tx, orgId, {
            title,
            body,
            tags,
            source: { kind: 'draft', draftId: draft.id, runId: draft.runId },
            createdBy: decidedBy
          })
        : await reviseRecord(tx, orgId, draft.targetRecordId, { title, body, tags }, null, decidedBy)
    // nothing was written yet: the draft stays open
    if (record === 'missing' || record === 'stale') return 'target-gone' as const
    const [decided] = await tx
      .update(knowledgeDrafts)
      .set({ state: 'approved', decidedAt: sql`now()`, decidedBy })
      .where(eq(knowledgeDrafts.id, id))
      .returning()
    return { draft: decided!, record }
  })
}

export async function rejectDraft(
  db: Db,
  orgId: string,
  id: string,
  decidedBy: string | null
): Promise<DraftRow | 'missing' | 'not-open'> {
  const [row] = await db
    .update(knowledgeDrafts)
    .set({ state: 'rejected', decidedAt: sql`now()`, decidedBy })
    .where(and(eq(knowledgeDrafts.orgId, orgId), eq(knowledgeDrafts.id, id), eq(knowledgeDrafts.state, 'open')))
    .returning()
  if (row) return row
  return (await getDraft(db, orgId, id)) ? 'not-open' : 'missing'
}
