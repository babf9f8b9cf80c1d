import { and, eq, isNotNull, isNull, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { projects } from './tables.js'

export type ProjectRow = typeof projects.$inferSelect

export function projectToWire(p: ProjectRow) {
  return {
    id: p.id,
    name: p.name,
    description: p.description,
    archivedAt: isoOrNull(p.archivedAt),
    createdAt: isoOf(p.createdAt),
    updatedAt: isoOf(p.updatedAt),
    createdBy: p.createdBy
  }
}

export async function createProject(
  db: Db,
  orgId: string,
  p: { name: string; description: string; createdBy: string | null }
): Promise<ProjectRow> {
  const [row] = await db
    .insert(projects)
    .values({ id: newId(), orgId, ...p })
    .returning()
  return row!
}

export async function getProject(db: Db, orgId: string, id: string): Promise<ProjectRow | null> {
  const [row] = await db
    .select()
    .from(projects)
    .where(and(eq(projects.orgId, orgId), eq(projects.id, id)))
  return row ?? null
}

/** Projects newest first; `archived` keeps only archived (true) or only active (false) ones. */
export async function listProjects(
  db: Db,
  orgId: string,
  q: { archived?: boolean | undefined; limit: number; cursor: string | undefined }
) {
  const list = keyset(projects.id, 'desc', q)
  const rows = await db
    .select()
    .from(projects)
    .where(
      and(
        eq(projects.orgId, orgId),
        q.archived === undefined
          ? undefined
          : q.archived
            ? isNotNull(projects.archivedAt)
            : isNull(projects.archivedAt),
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/** `archived: true` sets `archivedAt` (kept if already set), `false` clears it. */
export async function updateProject(
  db: Db,
  orgId: string,
  id: string,
  change: { name?: string | undefined; description?: string | undefined; archived?: boolean | undefined }
): Promise<ProjectRow | null> {
  const [row] = await db
    .update(projects)
    .set({
      ...(change.name !== undefined ? { name: change.name } : {}),
      ...(change.description !== undefined ? { description: change.description } : {}),
      ...(change.archived !== undefined
        ? { archivedAt: change.archived ? sql`coalesce(${projects.archivedAt}, now())` : null }
        : {}),
      updatedAt: sql`now()`
    })
    .where(and(eq(projects.orgId, orgId), eq(projects.id, id)))
    .returning()
  return row ?? null
}

/** Deletes a project and its tasks. */
export async function deleteProject(db: Db, orgId: string, id: string): Promise<boolean> {
  const rows = await db
    .delete(projects)
    .where(and(eq(projects.orgId, orgId), eq(projects.id, id)))
    .returning({ id: projects.id })
  return rows.length === 1
}
