import { and, asc, eq, gt, isNotNull, lte, min, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { decodeCursor, pageOf } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { MCP_TOOL_PREFIX } from '../../schemas/mcp.js'
import { mcpServers, type ListedTool } from './tables.js'

export type McpServerRow = typeof mcpServers.$inferSelect

/** What OpenAI and Anthropic accept as a tool (function) name. */
export const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/

/** The name a run sees a server's tool under. */
export const runToolName = (server: string, tool: string) => `${MCP_TOOL_PREFIX}${server}__${tool}`

/**
 * Why some of a server's listed tools are not offered to runs, one sentence each: a name a
 * model API would refuse once prefixed, or a name listed twice (the first is offered).
 */
export function toolWarnings(server: string, tools: ListedTool[]): string[] {
  const warnings: string[] = []
  const seen = new Set<string>()
  for (const tool of tools) {
    const name = runToolName(server, tool.name)
    if (!FUNCTION_NAME.test(name))
      warnings.push(
        `the tool ${JSON.stringify(tool.name)} is not offered to runs: model APIs accept tool names of 1 to 64 letters, digits, _ and - only, and it would be ${JSON.stringify(name)}`
      )
    else if (seen.has(tool.name))
      warnings.push(`the tool ${JSON.stringify(tool.name)} is listed twice: runs are offered the first`)
    seen.add(tool.name)
  }
  return warnings
}

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
    warnings: toolWarnings(s.name, s.tools),
    lastCheckedAt: isoOrNull(s.lastCheckedAt),
    failingSince: isoOrNull(s.failingSince),
    nextCheckAt: isoOrNull(s.nextCheckAt),
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

/**
 * The outcome of a connection (a check, a run start listing the tools, the background
 * check). A failure counts one more in a row and sets when the server is tried again
 * (`retryAt`); until then run starts skip it. A success clears all that.
 */
export async function recordConnection(
  db: Db,
  orgId: string,
  id: string,
  outcome: { ok: true; tools: ListedTool[] } | { ok: false; error: string; failures: number; retryAt: Date },
  now: Date
): Promise<McpServerRow | null> {
  const [row] = await db
    .update(mcpServers)
    .set(
      outcome.ok
        ? {
            ready: true,
            lastError: null,
            tools: outcome.tools,
            failures: 0,
            failingSince: null,
            nextCheckAt: null,
            lastCheckedAt: now,
            updatedAt: now
          }
        : {
            ready: false,
            lastError: outcome.error,
            failures: outcome.failures,
            failingSince: sql`coalesce(${mcpServers.failingSince}, ${now.toISOString()}::timestamptz)`,
            nextCheckAt: outcome.retryAt,
            lastCheckedAt: now,
            updatedAt: now
          }
    )
    .where(and(eq(mcpServers.orgId, orgId), eq(mcpServers.id, id)))
    .returning()
  return row ?? null
}

/**
 * One server whose next check is due (whichever org), its next check moved to `leaseUntil`
 * so that no other instance checks it meanwhile (`SKIP LOCKED`); null when none is due.
 */
export async function claimDueCheck(db: Db, now: Date, leaseUntil: Date): Promise<McpServerRow | null> {
  return db.transaction(async (tx) => {
    const [due] = await tx
      .select({ id: mcpServers.id })
      .from(mcpServers)
      .where(lte(mcpServers.nextCheckAt, now))
      .orderBy(asc(mcpServers.nextCheckAt))
      .limit(1)
      .for('update', { skipLocked: true })
    if (!due) return null
    const [row] = await tx
      .update(mcpServers)
      .set({ nextCheckAt: leaseUntil })
      .where(eq(mcpServers.id, due.id))
      .returning()
    return row ?? null
  })
}

/** When the soonest background check is due, or null when every server answers. */
export async function nextCheckDue(db: Db): Promise<Date | null> {
  const [row] = await db
    .select({ at: min(mcpServers.nextCheckAt) })
    .from(mcpServers)
    .where(isNotNull(mcpServers.nextCheckAt))
  const at = row?.at as Date | string | null | undefined
  return at ? new Date(at) : null
}
