import { sql } from 'drizzle-orm'
import { bigint, check, index, integer, pgTable, primaryKey, text, uniqueIndex } from 'drizzle-orm/pg-core'
import { ts } from '../db/columns.js'
import { PROPOSAL_STATES, VERSION_SOURCES } from '../../schemas/artifacts.js'
import { organizations } from '../auth/tables.js'
import { sqlList } from '../db/sql-list.js'

const bytes = (name: string) => bigint(name, { mode: 'number' })

export type VersionSource = (typeof VERSION_SOURCES)[number]
export type ProposalState = (typeof PROPOSAL_STATES)[number]

/**
 * One stored content per (org, SHA-256): the same bytes twice in one org are one blob,
 * never shared across orgs. A writer pins the row (`pinned_until`) before it puts the
 * bytes under their address and keeps it pinned until its referencing row commits; the
 * sweeper removes a blob only when its pin has passed and no upload, version or proposal
 * names it, holding the row lock while it deletes the bytes.
 */
export const blobs = pgTable(
  'blobs',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    sha256: text('sha256').notNull(),
    size: bytes('size').notNull(),
    pinnedUntil: ts('pinned_until').notNull(),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [primaryKey({ columns: [t.orgId, t.sha256] }), index('blobs_pinned_idx').on(t.pinnedUntil)]
)

/** A file sent with `POST /api/uploads`. */
export const uploads = pgTable(
  'uploads',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    size: bytes('size').notNull(),
    contentType: text('content_type').notNull(),
    sha256: text('sha256').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [index('uploads_org_idx').on(t.orgId, t.id), index('uploads_blob_idx').on(t.orgId, t.sha256)]
)

/** An artifact; its current content is the version `version` in artifact_versions. */
export const artifacts = pgTable(
  'artifacts',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    runId: text('run_id'),
    rootRunId: text('root_run_id'),
    name: text('name').notNull(),
    contentType: text('content_type').notNull(),
    size: bytes('size').notNull(),
    sha256: text('sha256').notNull(),
    version: integer('version').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    updatedAt: ts('updated_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    index('artifacts_org_idx').on(t.orgId, t.id),
    index('artifacts_org_run_idx').on(t.orgId, t.runId, t.id),
    index('artifacts_org_root_idx').on(t.orgId, t.rootRunId, t.id),
    // a run saves under a name once: saving the name again is a new version of that artifact
    uniqueIndex('artifacts_run_name_idx')
      .on(t.orgId, t.runId, t.name)
      .where(sql`run_id is not null`)
  ]
)

/** Every version of an artifact, byte for byte (`artifacts.fidelity: full`). */
export const artifactVersions = pgTable(
  'artifact_versions',
  {
    orgId: text('org_id').notNull(),
    artifactId: text('artifact_id')
      .notNull()
      .references(() => artifacts.id, { onDelete: 'cascade' }),
    version: integer('version').notNull(),
    size: bytes('size').notNull(),
    sha256: text('sha256').notNull(),
    contentType: text('content_type').notNull(),
    source: text('source').$type<VersionSource>().notNull(),
    runId: text('run_id'),
    createdAt: ts('created_at').notNull().defaultNow(),
    createdBy: text('created_by')
  },
  (t) => [
    primaryKey({ columns: [t.artifactId, t.version] }),
    index('artifact_versions_blob_idx').on(t.orgId, t.sha256),
    check('artifact_versions_source_check', sql`${t.source} in (${sqlList(VERSION_SOURCES)})`)
  ]
)

/** A suggested new version of an artifact, from a run or a person. */
export const artifactProposals = pgTable(
  'artifact_proposals',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    artifactId: text('artifact_id')
      .notNull()
      .references(() => artifacts.id, { onDelete: 'cascade' }),
    baseVersion: integer('base_version').notNull(),
    summary: text('summary'),
    state: text('state').$type<ProposalState>().notNull().default('open'),
    runId: text('run_id'),
    size: bytes('size').notNull(),
    sha256: text('sha256').notNull(),
    contentType: text('content_type').notNull(),
    createdAt: ts('created_at').notNull().defaultNow(),
    createdBy: text('created_by'),
    decidedAt: ts('decided_at'),
    decidedBy: text('decided_by')
  },
  (t) => [
    index('artifact_proposals_artifact_idx').on(t.orgId, t.artifactId, t.id),
    index('artifact_proposals_blob_idx').on(t.orgId, t.sha256),
    check('artifact_proposals_state_check', sql`${t.state} in (${sqlList(PROPOSAL_STATES)})`)
  ]
)
