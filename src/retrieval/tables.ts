import { sql } from 'drizzle-orm'
import { check, index, integer, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'
import { sqlList } from '../db/sql-list.js'

/** What has an embedding: a Memory Hub fact, a knowledge record, a document chunk. */
export const EMBEDDING_KINDS = ['memory', 'record', 'chunk'] as const
export type EmbeddingKind = (typeof EMBEDDING_KINDS)[number]
export const EMBEDDING_STATES = ['pending', 'ready', 'failed'] as const
export type EmbeddingState = (typeof EMBEDDING_STATES)[number]

/**
 * One row per embedded text, kept by triggers on the tables it embeds (migration
 * `0031_embeddings`): a changed text makes its row `pending` (with the text's hash) in the
 * writing statement itself, a delete deletes it. A new Memory Hub fact, knowledge record or
 * chunk gets its row when the embedding job takes it in (`embedding_queued` of its table), so
 * that adding one writes nothing more than itself.
 * The embedding worker claims pending rows with a lease (`lease_owner`, `lease_expires_at`),
 * and stores a vector only where the row still has the text hash it embedded.
 *
 * The `vector` column (pgvector's `vector`, any dimension) exists only where the database has
 * the extension, so it is not declared here: the migration adds it where it can, and
 * src/retrieval/vectors.ts reads and writes it in SQL of its own.
 */
export const embeddings = pgTable(
  'embeddings',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    kind: text('kind').$type<EmbeddingKind>().notNull(),
    itemId: text('item_id').notNull(),
    /** the memory pool of a fact; '' for knowledge (searched org-wide) */
    poolId: text('pool_id').notNull(),
    /** SHA-256 (hex) of the text to embed, as the trigger saw it */
    textHash: text('text_hash').notNull(),
    state: text('state').$type<EmbeddingState>().notNull().default('pending'),
    /** the model the vector was made with (its key: src/retrieval/models.ts), null before the first */
    model: text('model'),
    dimensions: integer('dimensions'),
    attempts: integer('attempts').notNull().default(0),
    lastError: text('last_error'),
    nextAttemptAt: ts('next_attempt_at').notNull().defaultNow(),
    leaseOwner: text('lease_owner'),
    leaseExpiresAt: ts('lease_expires_at'),
    updatedAt: ts('updated_at').notNull().defaultNow()
  },
  (t) => [
    primaryKey({ columns: [t.kind, t.itemId] }),
    // what the worker claims: pending rows, oldest due first
    index('embeddings_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`state = 'pending'`),
    // a pool's (or an org's knowledge) vectors: the exact scan reads these rows only
    index('embeddings_pool_idx').on(t.orgId, t.poolId, t.kind),
    check('embeddings_kind_check', sql`${t.kind} in (${sqlList(EMBEDDING_KINDS)})`),
    check('embeddings_state_check', sql`${t.state} in (${sqlList(EMBEDDING_STATES)})`)
  ]
)

/** The embedding model an org's admin chose (`PUT /api/models/embedding`); no row: the deployment's. */
export const embeddingSettings = pgTable('embedding_settings', {
  orgId: text('org_id')
    .primaryKey()
    .references(() => organizations.id, { onDelete: 'cascade' }),
  model: text('model').notNull(),
  /** the org provider serving it; null for the deployment's model or the built-in one */
  providerId: text('provider_id'),
  /** measured when it was chosen (one embedding call) */
  dimensions: integer('dimensions').notNull(),
  updatedBy: text('updated_by'),
  updatedAt: ts('updated_at').notNull().defaultNow()
})
