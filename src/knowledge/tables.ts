import { sql } from 'drizzle-orm'
import {
  bigint,
  boolean,
  check,
  customType,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  uniqueIndex
} from 'drizzle-orm/pg-core'
import { ts } from '../db/columns.js'
import { DOCUMENT_STATES, DRAFT_STATES, HISTORY_KINDS } from '../../schemas/knowledge.js'
import { organizations } from '../auth/tables.js'
import { sqlList } from '../db/sql-list.js'

const tsvector = customType<{ data: string }>({ dataType: () => 'tsvector' })

export type DocumentState = (typeof DOCUMENT_STATES)[number]
export type DraftState = (typeof DRAFT_STATES)[number]
export type HistoryKind = (typeof HISTORY_KINDS)[number]
export type RecordSource =
  | { kind: 'manual' }
  | { kind: 'draft'; draftId: string; runId: string | null }
  | { kind: 'wiki'; repo: string; commit: string; path: string; citedFiles: string[] }

/**
 * A knowledge record, at its current version. The search vector weighs the
 * title over the body; tags are matched exactly (`tags @> array[tag]`).
 */
export const knowledgeRecords = pgTable(
  'knowledge_records',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    title: text('title').notNull(),
    body: text('body').notNull(),
    tags: text('tags')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    source: jsonb('source').$type<RecordSource>().notNull(),
    version: integer('version').notNull().default(1),
    searchVector: tsvector('search_vector')
      .notNull()
      .generatedAlwaysAs(
        sql`setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'B')`
      ),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by'),
    /**
     * Whether the embedding job has taken this record in (its row in `embeddings` exists). A new
     * record is written with false and nothing else: the job finds it through
     * `knowledge_records_embedding_due_idx` and makes its row there (src/retrieval/embedding-worker.ts).
     */
    embeddingQueued: boolean('embedding_queued').notNull().default(false)
  },
  (t) => [
    index('knowledge_records_org_idx').on(t.orgId, t.id),
    index('knowledge_records_tags_idx').using('gin', t.tags),
    index('knowledge_records_search_idx').using('gin', t.searchVector),
    // the records the embedding job has not taken in yet (few: it takes them within moments)
    index('knowledge_records_embedding_due_idx')
      .on(t.id)
      .where(sql`not embedding_queued`)
  ]
)

/** Every version of every record, and its deletion; kept after the record is deleted. */
export const knowledgeRecordHistory = pgTable(
  'knowledge_record_history',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    recordId: text('record_id').notNull(),
    seq: integer('seq').notNull(),
    version: integer('version').notNull(),
    title: text('title').notNull(),
    body: text('body').notNull(),
    kind: text('kind').$type<HistoryKind>().notNull(),
    changedBy: text('changed_by'),
    changedAt: ts('changed_at').notNull().defaultNow()
  },
  (t) => [
    primaryKey({ columns: [t.orgId, t.recordId, t.seq] }),
    check('knowledge_record_history_kind_check', sql`${t.kind} in (${sqlList(HISTORY_KINDS)})`)
  ]
)

/**
 * A file whose text becomes searchable chunks. Its bytes are a blob of the
 * artifacts store (by SHA-256). Extraction workers claim a document with a lease
 * (`lease_owner`, `lease_expires_at`); a document whose lease passed is claimed again
 * until `attempts` reaches `max_attempts`; one whose attempt failed waits until
 * `next_attempt_at`.
 */
export const knowledgeDocuments = pgTable(
  'knowledge_documents',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    kind: text('kind').notNull(),
    contentType: text('content_type').notNull(),
    size: bigint('size', { mode: 'number' }).notNull(),
    sha256: text('sha256').notNull(),
    state: text('state').$type<DocumentState>().notNull().default('queued'),
    chunkCount: integer('chunk_count').notNull().default(0),
    attempts: integer('attempts').notNull().default(0),
    maxAttempts: integer('max_attempts').notNull(),
    lastError: text('last_error'),
    leaseOwner: text('lease_owner'),
    leaseExpiresAt: ts('lease_expires_at'),
    /** a queued document is not claimed before this (a failed attempt backs off, with jitter) */
    nextAttemptAt: ts('next_attempt_at').notNull().defaultNow(),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    index('knowledge_documents_org_idx').on(t.orgId, t.id),
    index('knowledge_documents_blob_idx').on(t.orgId, t.sha256),
    // what the workers look at: only documents not yet settled
    index('knowledge_documents_pending_idx')
      .on(t.state, t.createdAt)
      .where(sql`state in ('queued', 'processing')`),
    check('knowledge_documents_state_check', sql`${t.state} in (${sqlList(DOCUMENT_STATES)})`)
  ]
)

/** A document's text, cut along its headings; searchable with its heading path. */
export const knowledgeChunks = pgTable(
  'knowledge_chunks',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    documentId: text('document_id')
      .notNull()
      .references(() => knowledgeDocuments.id, { onDelete: 'cascade' }),
    idx: integer('idx').notNull(),
    heading: text('heading').notNull(),
    text: text('text').notNull(),
    searchVector: tsvector('search_vector')
      .notNull()
      .generatedAlwaysAs(
        sql`setweight(to_tsvector('english', heading), 'A') || setweight(to_tsvector('english', text), 'B')`
      ),
    /** whether the embedding job has taken this chunk in, as for a record (a new one: false) */
    embeddingQueued: boolean('embedding_queued').notNull().default(false)
  },
  (t) => [
    uniqueIndex('knowledge_chunks_document_idx').on(t.documentId, t.idx),
    index('knowledge_chunks_org_idx').on(t.orgId),
    index('knowledge_chunks_search_idx').using('gin', t.searchVector),
    // the chunks the embedding job has not taken in yet
    index('knowledge_chunks_embedding_due_idx')
      .on(t.id)
      .where(sql`not embedding_queued`)
  ]
)

/**
 * An org's vocabulary (lower-cased words with a letter, 3 to 32 characters) from its
 * records and chunks. A search that finds nothing replaces each plain query word the org
 * has never written by its nearest word here (pg_trgm), then searches again.
 */
export const knowledgeWords = pgTable(
  'knowledge_words',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    word: text('word').notNull()
  },
  (t) => [
    primaryKey({ columns: [t.orgId, t.word] }),
    index('knowledge_words_trgm_idx').using('gin', sql`${t.word} gin_trgm_ops`)
  ]
)

/**
 * Each org's knowledge generation: moved on in the transaction of every change to its
 * records and chunks (generation.ts), so search results cached under an older generation
 * are never served again, by any instance.
 */
export const knowledgeGenerations = pgTable('knowledge_generations', {
  orgId: text('org_id')
    .primaryKey()
    .references(() => organizations.id, { onDelete: 'cascade' }),
  generation: bigint('generation', { mode: 'number' }).notNull()
})

/** Knowledge a run or a person proposes (the learning lane). */
export const knowledgeDrafts = pgTable(
  'knowledge_drafts',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    title: text('title').notNull(),
    body: text('body').notNull(),
    tags: text('tags')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    targetRecordId: text('target_record_id'),
    state: text('state').$type<DraftState>().notNull().default('open'),
    runId: text('run_id'),
    createdAt: ts('created_at').notNull().defaultNow(),
    createdBy: text('created_by'),
    decidedAt: ts('decided_at'),
    decidedBy: text('decided_by')
  },
  (t) => [
    index('knowledge_drafts_org_idx').on(t.orgId, t.id),
    check('knowledge_drafts_state_check', sql`${t.state} in (${sqlList(DRAFT_STATES)})`)
  ]
)
