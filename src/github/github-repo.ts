import { and, eq, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { githubCache, githubWikiPages, githubWikiRuns } from './tables.js'

// ---- conditional-request cache ---------------------------------------------------

export interface CachedList {
  etag: string
  body: { items: unknown[]; hasNext: boolean }
}

export async function getCachedList(db: Db, orgId: string, request: string): Promise<CachedList | null> {
  const [row] = await db
    .select({ etag: githubCache.etag, body: githubCache.body })
    .from(githubCache)
    .where(and(eq(githubCache.orgId, orgId), eq(githubCache.request, request)))
  return row ?? null
}

export async function putCachedList(db: Db, orgId: string, request: string, entry: CachedList): Promise<void> {
  await db
    .insert(githubCache)
    .values({ orgId, request, etag: entry.etag, body: entry.body })
    .onConflictDoUpdate({
      target: [githubCache.orgId, githubCache.request],
      set: { etag: entry.etag, body: entry.body, updatedAt: sql`now()` }
    })
}

/** Forgets an org's cached answers (another token, or none, sees other things). */
export async function clearCachedLists(db: Db, orgId: string): Promise<void> {
  await db.delete(githubCache).where(eq(githubCache.orgId, orgId))
}

// ---- repo wiki -------------------------------------------------------------------

export type WikiRunRow = typeof githubWikiRuns.$inferSelect
export type WikiPageRow = typeof githubWikiPages.$inferSelect

export async function insertWikiRun(
  tx: Tx,
  row: { runId: string; orgId: string; repo: string; ref: string; commit: string }
): Promise<void> {
  await tx.insert(githubWikiRuns).values(row)
}

export async function getWikiRun(db: Db, orgId: string, runId: string): Promise<WikiRunRow | null> {
  const [row] = await db
    .select()
    .from(githubWikiRuns)
    .where(and(eq(githubWikiRuns.orgId, orgId), eq(githubWikiRuns.runId, runId)))
  return row ?? null
}

/** The pages of an org's wiki of one repository. */
export async function listWikiPages(db: Db | Tx, orgId: string, repo: string): Promise<WikiPageRow[]> {
  return db
    .select()
    .from(githubWikiPages)
    .where(and(eq(githubWikiPages.orgId, orgId), eq(githubWikiPages.repo, repo)))
    .orderBy(githubWikiPages.path)
}

export async function getWikiPage(tx: Tx, orgId: string, repo: string, path: string): Promise<WikiPageRow | null> {
  const [row] = await tx
    .select()
    .from(githubWikiPages)
    .where(and(eq(githubWikiPages.orgId, orgId), eq(githubWikiPages.repo, repo), eq(githubWikiPages.path, path)))
  return row ?? null
}

export async function putWikiPage(
  tx: Tx,
  row: { orgId: string; repo: string; path: string; recordId: string; commit: string; cited: Record<string, string> }
): Promise<void> {
  await tx
    .insert(githubWikiPages)
    .values(row)
    .onConflictDoUpdate({
      target: [githubWikiPages.orgId, githubWikiPages.repo, githubWikiPages.path],
      set: { recordId: row.recordId, commit: row.commit, cited: row.cited, updatedAt: sql`now()` }
    })
}

export async function deleteWikiPage(tx: Tx, orgId: string, repo: string, path: string): Promise<void> {
  await tx
    .delete(githubWikiPages)
    .where(and(eq(githubWikiPages.orgId, orgId), eq(githubWikiPages.repo, repo), eq(githubWikiPages.path, path)))
}

/**
 * Serializes the writes of one org's wiki of one repository (two builds at once write
 * each page once), for the rest of the caller's transaction.
 */
export async function lockWiki(tx: Tx, orgId: string, repo: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`cairn.github_wiki:${orgId}:${repo}`}))`)
}
