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
import { organizations } from '../auth/tables.js'

const tsvector = customType<{ data: string }>({ dataType: () => 'tsvector' })

/** Per-org switch: an org admin can turn memory off for the org (no row = on). */
export const memorySettings = pgTable('memory_settings', {
  orgId: text('org_id')
    .primaryKey()
    .references(() => organizations.id, { onDelete: 'cascade' }),
  enabled: boolean('enabled').notNull(),
  /** after a run succeeds, ask its model for the durable facts of the exchange */
  extract: boolean('extract').notNull().default(false),
  updatedBy: text('updated_by').notNull(),
  updatedAt: ts('updated_at').notNull().defaultNow()
})

/**
 * A pool's identity. One org pool per org (owner_key ''), one personal pool per (org, real
 * user) (owner_key = user id); created on first write.
 */
export const memoryPools = pgTable(
  'memory_pools',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    scope: text('scope').$type<'org' | 'personal'>().notNull(),
    ownerKey: text('owner_key').notNull(),
    /** items in the pool (postgres backend), kept with every insert and delete: browse's total */
    itemCount: integer('item_count').notNull().default(0),
    /**
     * moved on in the transaction of every change to the pool's items (insert, edit, delete),
     * so a search result cached under an older generation is never served again, whichever
     * instance made the change
     */
    generation: bigint('generation', { mode: 'number' }).notNull().default(0),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [
    uniqueIndex('memory_pools_owner_key').on(t.orgId, t.ownerKey),
    check(
      'memory_pools_scope_check',
      sql`(${t.scope} = 'org' and ${t.ownerKey} = '') or (${t.scope} = 'personal' and ${t.ownerKey} <> '')`
    )
  ]
)

/** Facts of the postgres backend. */
export const memoryItems = pgTable(
  'memory_items',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    poolId: text('pool_id')
      .notNull()
      .references(() => memoryPools.id, { onDelete: 'cascade' }),
    content: text('content').notNull(),
    /** SHA-256 of the normalized content: a fact is kept once per pool */
    contentHash: text('content_hash').notNull(),
    searchVector: tsvector('search_vector')
      .notNull()
      .generatedAlwaysAs(sql`to_tsvector('english', content)`),
    background: boolean('background').notNull().default(false),
    sourceRunId: text('source_run_id'),
    rootRunId: text('root_run_id'),
    /** the capture that delivered it, with the fact's index: a redelivery is dropped */
    captureId: text('capture_id'),
    factIndex: integer('fact_index'),
    /**
     * Whether the embedding job has taken this fact in (its row in `embeddings` exists). A new
     * fact is written with false and nothing else: the job finds it through
     * `memory_items_embedding_due_idx` and makes its row there, so adding a fact costs one small
     * index entry, not a second row (src/retrieval/embedding-worker.ts).
     */
    embeddingQueued: boolean('embedding_queued').notNull().default(false),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow()
  },
  (t) => [
    uniqueIndex('memory_items_pool_content_key').on(t.poolId, t.contentHash),
    uniqueIndex('memory_items_capture_fact_key').on(t.captureId, t.factIndex),
    // ascending: read backwards it gives `order by id desc` (drizzle's `.desc()` is DESC NULLS LAST, which
    // that order cannot use, so every newest-first walk sorted the whole pool)
    index('memory_items_pool_newest_idx').on(t.orgId, t.poolId, t.id),
    index('memory_items_search_idx').using('gin', t.searchVector),
    // the facts the embedding job has not taken in yet (few: it takes them within moments)
    index('memory_items_embedding_due_idx')
      .on(t.id)
      .where(sql`not embedding_queued`)
  ]
)

/**
 * A pool's vocabulary (lower-cased words with a letter, 3 to 32 characters). Search matches a
 * misspelled query word against it with pg_trgm, then looks the corrected words up with
 * full-text search: small, indexed, and never shared between pools.
 */
export const memoryWords = pgTable(
  'memory_words',
  {
    poolId: text('pool_id')
      .notNull()
      .references(() => memoryPools.id, { onDelete: 'cascade' }),
    word: text('word').notNull()
  },
  (t) => [
    primaryKey({ columns: [t.poolId, t.word] }),
    index('memory_words_trgm_idx').using('gin', sql`${t.word} gin_trgm_ops`)
  ]
)

/** Every change to an item, with who made it; kept after the item is deleted. */
export const memoryItemHistory = pgTable(
  'memory_item_history',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    poolId: text('pool_id')
      .notNull()
      .references(() => memoryPools.id, { onDelete: 'cascade' }),
    itemId: text('item_id').notNull(),
    content: text('content').notNull(),
    kind: text('kind').$type<'created' | 'updated' | 'deleted'>().notNull(),
    changedBy: text('changed_by').notNull(),
    changedAt: ts('changed_at').notNull().defaultNow()
  },
  (t) => [index('memory_item_history_item_idx').on(t.poolId, t.itemId, t.id)]
)

/** A captured fact: a string goes to the org pool; a personal one names its owner (the run's real user). */
export type CaptureFact = string | { content: string; scope: 'personal'; owner: string }

export const CAPTURE_STATES = ['pending', 'delivering', 'delivered', 'dead', 'discarded'] as const
export type CaptureState = (typeof CAPTURE_STATES)[number]

/** The capture outbox: one row per run, written in the run's own transaction. */
export const memoryCaptures = pgTable(
  'memory_captures',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    runId: text('run_id').notNull(),
    rootRunId: text('root_run_id').notNull(),
    state: text('state').$type<CaptureState>().notNull(),
    attempts: integer('attempts').notNull().default(0),
    maxAttempts: integer('max_attempts').notNull(),
    lastError: text('last_error'),
    itemCount: integer('item_count').notNull(),
    facts: jsonb('facts').$type<CaptureFact[]>().notNull(),
    /** once delivered: the facts the pool took as new, and those it already held (merged) */
    addedCount: integer('added_count'),
    mergedCount: integer('merged_count'),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    nextAttemptAt: ts('next_attempt_at').notNull().defaultNow(),
    deliveredAt: ts('delivered_at'),
    leaseExpiresAt: ts('lease_expires_at')
  },
  (t) => [
    uniqueIndex('memory_captures_run_key').on(t.orgId, t.runId),
    index('memory_captures_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.state} = 'pending'`),
    // deliveries whose lease passed (the postgres backend takes them back)
    index('memory_captures_lease_idx')
      .on(t.leaseExpiresAt)
      .where(sql`${t.state} = 'delivering'`),
    index('memory_captures_org_newest_idx').on(t.orgId, t.id),
    // GET /metrics counts the captures given up, whatever the table's size
    index('memory_captures_dead_idx')
      .on(t.updatedAt)
      .where(sql`${t.state} = 'dead'`),
    check('memory_captures_state_check', sql`${t.state} in ('pending', 'delivering', 'delivered', 'dead', 'discarded')`)
  ]
)

/** The recall ledger: one frame per retrieval made for a run. */
export const memoryRecalls = pgTable(
  'memory_recalls',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    runId: text('run_id').notNull(),
    rootRunId: text('root_run_id').notNull(),
    scope: text('scope').$type<'org' | 'personal'>().notNull(),
    query: text('query').notNull(),
    itemIds: jsonb('item_ids').$type<string[]>().notNull(),
    latencyMs: integer('latency_ms').notNull(),
    /** how it ranked: `hybrid`, `semantic` or `fulltext` (also where vectors were missing or the query's failed) */
    mode: text('mode').notNull().default('fulltext'),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [
    index('memory_recalls_org_newest_idx').on(t.orgId, t.id),
    index('memory_recalls_run_idx').on(t.orgId, t.runId, t.id),
    index('memory_recalls_root_idx').on(t.orgId, t.rootRunId, t.id)
  ]
)
