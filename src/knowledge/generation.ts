import { eq, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { knowledgeGenerations } from './tables.js'

/**
 * Called in every transaction that changes what an org's search can find (records,
 * chunks): the org's knowledge generation moves on with the change, on every instance at
 * once, so a search result cached under the old generation is never served again.
 */
export async function bumpGeneration(tx: Db | Tx, orgId: string): Promise<void> {
  await tx.execute(sql`
    insert into ${knowledgeGenerations} (org_id, generation) values (${orgId}, 1)
    on conflict (org_id) do update set generation = ${knowledgeGenerations.generation} + 1`)
}

export async function currentGeneration(db: Db, orgId: string): Promise<number> {
  const [row] = await db
    .select({ generation: knowledgeGenerations.generation })
    .from(knowledgeGenerations)
    .where(eq(knowledgeGenerations.orgId, orgId))
  return row?.generation ?? 0
}
