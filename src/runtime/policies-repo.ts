import { and, eq } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { toolPolicies, type ToolMode } from './tables.js'

/** The policies the org set (a tool without a row has its default). */
export async function policyRows(db: Db, orgId: string) {
  return db.select().from(toolPolicies).where(eq(toolPolicies.orgId, orgId))
}

/** The mode the org set for a tool, or null for its default. */
export async function policyMode(db: Db, orgId: string, tool: string): Promise<ToolMode | null> {
  const [row] = await db
    .select({ mode: toolPolicies.mode })
    .from(toolPolicies)
    .where(and(eq(toolPolicies.orgId, orgId), eq(toolPolicies.tool, tool)))
  return row?.mode ?? null
}

export async function setPolicyMode(
  db: Db,
  orgId: string,
  tool: string,
  mode: ToolMode,
  userId: string | null
): Promise<void> {
  await db
    .insert(toolPolicies)
    .values({ orgId, tool, mode, updatedBy: userId })
    .onConflictDoUpdate({
      target: [toolPolicies.orgId, toolPolicies.tool],
      set: { mode, updatedBy: userId, updatedAt: new Date() }
    })
}
