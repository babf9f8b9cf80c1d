import { and, asc, eq, gt } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { decodeCursor, pageOf } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { mcpServers, type ListedTool } from './tables.js'

export type McpServerRow = typeof mcpServers.$inferSelect

/** The server as the API shows it: header names, never their values; tools without their schemas. */
export function mcpServerToWire(s: McpServerRow) {
  return {
    id: s.id,
    name: s.name,
    url: s.url,
    headerNames: s.headerNames,
    ready: s.ready,
    lastError: s.lastError,
    tools: s.tools.map((t) => ({ name: t.name, description: t.description })),
    lastCheckedAt: isoOrNull(s.lastCheckedAt),
    createdAt: isoOf(s.createdAt),
    updatedAt: isoOf(s.updatedAt),
    createdBy: s.createdBy
  }
}

/** The secret name of one header's value (stored as `cairn:mcp:<id>:header:<name>`). */
export const headerSecretName = (serverId: string, header: string) => `mcp:${serverId}:header:${header.toLowerCase()}`

/** Inserts a server; null when the org already has one of that name. */
export async function insertMcpServer(
  db: Db,
  orgId: string,
  s: { id: string; name: string; url: string; headerNames: string[]; createdBy: string | null }
): Promise<McpServerRow | null> {
  const [row] = await db
    .insert(mcpServers)
    .values({ ...s, orgId })
    .onConflictDoNothing({ target: [mcpServers.orgId, mcpServers.name] })
    .returning()
  return row ?? null
}

export async function getMcpServer(db: Db, orgId: string, id: string): Promise<McpServerRow | null> {
  const [row] = await db
    .select()
    .from(mcpServers)
    .where(and(eq(mcpServers.orgId, orgId), eq(mcpServers.id, id)))
  return row ?? null
}

export async function mcpServerNamed(db: Db, orgId: string, name: string): Promise<McpServerRow | null> {
  const [row] = await db
    .select()
    .from(mcpServers)
    .where(and(eq(mcpServers.orgId, orgId), eq(mcpServers.name, name)))
  return row ?? null
}

/** Every server of the org, oldest first (the tools offered to a run). */
export async function allMcpServers(db: Db, orgId: string): Promise<McpServerRow[]> {
  return db.select().from(mcpServers).where(eq(mcpServers.orgId, orgId)).orderBy(asc(mcpServers.id))
}

export async function listMcpServers(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const cursor = decodeCursor(q.cursor)
  const rows = await db
    .select()
    .from(mcpServers)
    .where(and(eq(mcpServers.orgId, orgId), cursor ? gt(mcpServers.id, cursor) : undefined))
    .orderBy(asc(mcpServers.id))
    .limit(q.limit + 1)
  return pageOf(rows, q.limit, (s) => s.id)
}

export async function deleteMcpServer(db: Db, orgId: string, id: string): Promise<McpServerRow | null> {
  const [row] = await db
    .delete(mcpServers)
    .where(and(eq(mcpServers.orgId, orgId), eq(mcpServers.id, id)))
    .returning()
  return row ?? null
}

/** The outcome of a connection (a check, or a run start listing the tools). */
export async function recordConnection(
  db: Db,
  orgId: string,
  id: string,
  outcome: { ok: true; tools: ListedTool[] } | { ok: false; error: string }
): Promise<McpServerRow | null> {
  const now = new Date()
  const [row] = await db
    .update(mcpServers)
    .set(
      outcome.ok
        ? { ready: true, lastError: null, tools: outcome.tools, lastCheckedAt: now, updatedAt: now }
        : { ready: false, lastError: outcome.error, lastCheckedAt: now, updatedAt: now }
    )
    .where(and(eq(mcpServers.orgId, orgId), eq(mcpServers.id, id)))
    .returning()
  return row ?? null
}
