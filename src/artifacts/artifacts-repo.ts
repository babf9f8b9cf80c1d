import { and, eq, inArray, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { decodeCursor, invalidCursor, keyset, type PageInput } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { referenceBlob, type StoredBlob } from './blobs.js'
import {
  artifactProposals,
  artifacts,
  artifactVersions,
  uploads,
  type ProposalState,
  type VersionSource
} from './tables.js'

export type UploadRow = typeof uploads.$inferSelect
export type ArtifactRow = typeof artifacts.$inferSelect
export type VersionRow = typeof artifactVersions.$inferSelect
export type ProposalRow = typeof artifactProposals.$inferSelect

export function uploadToWire(u: UploadRow) {
  return {
    id: u.id,
    name: u.name,
    size: u.size,
    contentType: u.contentType,
    sha256: u.sha256,
    createdAt: isoOf(u.createdAt),
    createdBy: u.createdBy
  }
}

export function artifactToWire(a: ArtifactRow) {
  return {
    id: a.id,
    runId: a.runId,
    rootRunId: a.rootRunId,
    name: a.name,
    contentType: a.contentType,
    size: a.size,
    sha256: a.sha256,
    version: a.version,
    createdAt: isoOf(a.createdAt),
    updatedAt: isoOf(a.updatedAt),
    createdBy: a.createdBy
  }
}

export function versionToWire(v: VersionRow) {
  return {
    version: v.version,
    size: v.size,
    sha256: v.sha256,
    contentType: v.contentType,
    source: v.source,
    runId: v.runId,
    createdAt: isoOf(v.createdAt),
    createdBy: v.createdBy
  }
}

export function proposalToWire(p: ProposalRow) {
  return {
    id: p.id,
    artifactId: p.artifactId,
    baseVersion: p.baseVersion,
    summary: p.summary,
    state: p.state,
    runId: p.runId,
    createdAt: isoOf(p.createdAt),
    createdBy: p.createdBy,
    decidedAt: isoOrNull(p.decidedAt),
    decidedBy: p.decidedBy
  }
}

// ---------------------------------------------------------------------------------
// Uploads

export async function createUpload(
  db: Db,
  row: { orgId: string; name: string; contentType: string; blob: StoredBlob; createdBy: string | null }
): Promise<UploadRow> {
  return db.transaction(async (tx) => {
    await referenceBlob(tx, row.orgId, row.blob.sha256)
    const [upload] = await tx
      .insert(uploads)
      .values({
        id: newId(),
        orgId: row.orgId,
        name: row.name,
        size: row.blob.size,
        contentType: row.contentType,
        sha256: row.blob.sha256,
        createdBy: row.createdBy
      })
      .returning()
    return upload!
  })
}

/** The org's uploads among these ids, in one query. */
export async function uploadsAmong(db: Db, orgId: string, ids: string[]): Promise<UploadRow[]> {
  if (ids.length === 0) return []
  return db
    .select()
    .from(uploads)
    .where(and(eq(uploads.orgId, orgId), inArray(uploads.id, ids)))
}

export async function getUpload(db: Db | Tx, orgId: string, id: string): Promise<UploadRow | null> {
  const [row] = await db
    .select()
    .from(uploads)
    .where(and(eq(uploads.orgId, orgId), eq(uploads.id, id)))
  return row ?? null
}

export async function listUploads(db: Db, orgId: string, q: PageInput) {
  const list = keyset(uploads.id, 'desc', q)
  const rows = await db
    .select()
    .from(uploads)
    .where(and(eq(uploads.orgId, orgId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

export async function deleteUpload(db: Db, orgId: string, id: string): Promise<boolean> {
  const gone = await db
    .delete(uploads)
    .where(and(eq(uploads.orgId, orgId), eq(uploads.id, id)))
    .returning({ id: uploads.id })
  return gone.length > 0
}

// ---------------------------------------------------------------------------------
// Artifacts and versions

export interface NewContent {
  blob: Pick<StoredBlob, 'sha256' | 'size'>
  contentType: string
  source: VersionSource
  runId: string | null
  createdBy: string | null
}

/** A new artifact at version 1, with its first version row. */
export async function createArtifact(
  tx: Tx,
  orgId: string,
  input: NewContent & { name: string; rootRunId: string | null }
): Promise<ArtifactRow> {
  await referenceBlob(tx, orgId, input.blob.sha256)
  const [artifact] = await tx
    .insert(artifacts)
    .values({
      id: newId(),
      orgId,
      runId: input.runId,
      rootRunId: input.rootRunId,
      name: input.name,
      contentType: input.contentType,
      size: input.blob.size,
      sha256: input.blob.sha256,
      version: 1,
      createdBy: input.createdBy
    })
    .returning()
  await insertVersion(tx, orgId, artifact!, input)
  return artifact!
}

async function insertVersion(tx: Tx, orgId: string, artifact: ArtifactRow, input: NewContent): Promise<void> {
  await tx.insert(artifactVersions).values({
    orgId,
    artifactId: artifact.id,
    version: artifact.version,
    size: input.blob.size,
    sha256: input.blob.sha256,
    contentType: input.contentType,
    source: input.source,
    runId: input.runId,
    createdBy: input.createdBy
  })
}

/**
 * The next version of an artifact, if it is still at `expected` (any version when null):
 * one guarded UPDATE, so of concurrent writers expecting the same version exactly one
 * wins. `stale` when the artifact moved on, null when there is no such artifact.
 */
export async function addVersion(
  tx: Tx,
  orgId: string,
  id: string,
  expected: number | null,
  input: NewContent
): Promise<ArtifactRow | 'stale' | null> {
  await referenceBlob(tx, orgId, input.blob.sha256)
  const [artifact] = await tx
    .update(artifacts)
    .set({
      version: sql`${artifacts.version} + 1`,
      size: input.blob.size,
      sha256: input.blob.sha256,
      contentType: input.contentType,
      updatedAt: sql`now()`
    })
    .where(
      and(
        eq(artifacts.orgId, orgId),
        eq(artifacts.id, id),
        expected === null ? undefined : eq(artifacts.version, expected)
      )
    )
    .returning()
  if (!artifact) return (await getArtifact(tx, orgId, id)) ? 'stale' : null
  await insertVersion(tx, orgId, artifact, input)
  return artifact
}

/**
 * What a run saves under a name: a new artifact the first time, the next version of the
 * same artifact after that (one per run and name).
 */
export async function saveRunArtifact(
  db: Db,
  run: { orgId: string; runId: string; rootRunId: string },
  name: string,
  content: Omit<NewContent, 'source' | 'runId' | 'createdBy'>
): Promise<ArtifactRow> {
  return db.transaction(async (tx) => {
    const [existing] = await tx
      .select({ id: artifacts.id })
      .from(artifacts)
      .where(and(eq(artifacts.orgId, run.orgId), eq(artifacts.runId, run.runId), eq(artifacts.name, name)))
      .for('update')
    const input: NewContent = { ...content, source: 'run', runId: run.runId, createdBy: null }
    if (existing) {
      const next = await addVersion(tx, run.orgId, existing.id, null, input)
      if (next && next !== 'stale') return next
    }
    return createArtifact(tx, run.orgId, { ...input, name, rootRunId: run.rootRunId })
  })
}

/** The artifact a run saved under a name (a run has at most one per name), if any. */
export async function runArtifactNamed(db: Db, orgId: string, runId: string, name: string): Promise<string | null> {
  const [row] = await db
    .select({ id: artifacts.id })
    .from(artifacts)
    .where(and(eq(artifacts.orgId, orgId), eq(artifacts.runId, runId), eq(artifacts.name, name)))
  return row?.id ?? null
}

export async function getArtifact(db: Db | Tx, orgId: string, id: string): Promise<ArtifactRow | null> {
  const [row] = await db
    .select()
    .from(artifacts)
    .where(and(eq(artifacts.orgId, orgId), eq(artifacts.id, id)))
  return row ?? null
}

export async function listArtifacts(
  db: Db,
  orgId: string,
  q: PageInput & { runId?: string | undefined; rootRunId?: string | undefined }
) {
  const list = keyset(artifacts.id, 'desc', q)
  const rows = await db
    .select()
    .from(artifacts)
    .where(
      and(
        eq(artifacts.orgId, orgId),
        q.runId ? eq(artifacts.runId, q.runId) : undefined,
        q.rootRunId ? eq(artifacts.rootRunId, q.rootRunId) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/** Deletes an artifact with every version and proposal; their blobs go with the next sweep. */
export async function deleteArtifact(db: Db, orgId: string, id: string): Promise<boolean> {
  const gone = await db
    .delete(artifacts)
    .where(and(eq(artifacts.orgId, orgId), eq(artifacts.id, id)))
    .returning({ id: artifacts.id })
  return gone.length > 0
}

export async function getVersion(db: Db | Tx, orgId: string, id: string, version: number): Promise<VersionRow | null> {
  const [row] = await db
    .select()
    .from(artifactVersions)
    .where(
      and(eq(artifactVersions.orgId, orgId), eq(artifactVersions.artifactId, id), eq(artifactVersions.version, version))
    )
  return row ?? null
}

/** The largest version the integer column holds. */
const MAX_VERSION = 2_147_483_647

/** Versions newest first; the cursor is the last version seen. */
export async function listVersions(db: Db, orgId: string, id: string, q: PageInput) {
  const list = keyset(artifactVersions.version, 'desc', q, versionOfCursor)
  const rows = await db
    .select()
    .from(artifactVersions)
    .where(and(eq(artifactVersions.orgId, orgId), eq(artifactVersions.artifactId, id), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows, (v) => String(v.version))
}

function versionOfCursor(cursor: string | undefined): number | null {
  const key = decodeCursor(cursor, /^[1-9][0-9]{0,9}$/)
  const version = key === null ? null : Number(key)
  if (version !== null && version > MAX_VERSION) throw invalidCursor()
  return version
}

// ---------------------------------------------------------------------------------
// Proposals

export async function createProposal(
  db: Db,
  orgId: string,
  artifactId: string,
  input: {
    baseVersion: number
    summary: string | null
    blob: StoredBlob
    contentType: string
    runId: string | null
    createdBy: string | null
  }
): Promise<ProposalRow> {
  return db.transaction(async (tx) => {
    await referenceBlob(tx, orgId, input.blob.sha256)
    const [row] = await tx
      .insert(artifactProposals)
      .values({
        id: newId(),
        orgId,
        artifactId,
        baseVersion: input.baseVersion,
        summary: input.summary,
        runId: input.runId,
        size: input.blob.size,
        sha256: input.blob.sha256,
        contentType: input.contentType,
        createdBy: input.createdBy
      })
      .returning()
    return row!
  })
}

export async function getProposal(
  db: Db | Tx,
  orgId: string,
  artifactId: string,
  id: string
): Promise<ProposalRow | null> {
  const [row] = await db
    .select()
    .from(artifactProposals)
    .where(
      and(
        eq(artifactProposals.orgId, orgId),
        eq(artifactProposals.artifactId, artifactId),
        eq(artifactProposals.id, id)
      )
    )
  return row ?? null
}

export async function listProposals(
  db: Db,
  orgId: string,
  artifactId: string,
  q: PageInput & { state?: ProposalState | undefined }
) {
  const list = keyset(artifactProposals.id, 'desc', q)
  const rows = await db
    .select()
    .from(artifactProposals)
    .where(
      and(
        eq(artifactProposals.orgId, orgId),
        eq(artifactProposals.artifactId, artifactId),
        q.state ? eq(artifactProposals.state, q.state) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

export type Decision = { artifact: ArtifactRow | null; proposal: ProposalRow } | 'not_open' | 'stale' | null

/**
 * Accepts or rejects an open proposal. Accepting adds a version (source `proposal`) only
 * if the artifact is still at the proposal's base version; both checks and both writes
 * are one transaction under the proposal's row lock, so of two racing decisions one wins.
 */
export async function decideProposal(
  db: Db,
  orgId: string,
  artifactId: string,
  id: string,
  accept: boolean,
  decidedBy: string | null
): Promise<Decision> {
  return db.transaction(async (tx) => {
    const [proposal] = await tx
      .select()
      .from(artifactProposals)
      .where(
        and(
          eq(artifactProposals.orgId, orgId),
          eq(artifactProposals.artifactId, artifactId),
          eq(artifactProposals.id, id)
        )
      )
      .for('update')
    if (!proposal) return null
    if (proposal.state !== 'open') return 'not_open'
    let artifact: ArtifactRow | null = null
    if (accept) {
      const next = await addVersion(tx, orgId, artifactId, proposal.baseVersion, {
        blob: proposal,
        contentType: proposal.contentType,
        source: 'proposal',
        runId: proposal.runId,
        createdBy: decidedBy
      })
      if (next === 'stale') return 'stale'
      if (!next) return null
      artifact = next
    }
    const [decided] = await tx
      .update(artifactProposals)
      .set({ state: accept ? 'accepted' : 'rejected', decidedAt: sql`now()`, decidedBy })
      .where(eq(artifactProposals.id, id))
      .returning()
    return { artifact, proposal: decided! }
  })
}
