import { createHash } from 'node:crypto'
import { and, desc, eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { isUniqueViolation } from '../db/faults.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import { parseSkillMd } from './skill-md.js'
import type { SkillRow } from './skills-repo.js'
import { skillProposals, skills, type SkillProposalState } from './tables.js'

export type ProposalRow = typeof skillProposals.$inferSelect

export function proposalToWire(p: ProposalRow) {
  return {
    id: p.id,
    skillId: p.skillId,
    baseVersion: p.baseVersion,
    skillMd: p.skillMd,
    state: p.state,
    runId: p.runId,
    createdAt: isoOf(p.createdAt),
    createdBy: p.createdBy,
    decidedAt: isoOrNull(p.decidedAt),
    decidedBy: p.decidedBy
  }
}

/** The same file whatever its byte-order mark, line ends or trailing blanks: what "the exact content" means. */
export function contentHash(skillMd: string): string {
  const normalized = skillMd
    .replace(/^\uFEFF/, '')
    .replace(/\r\n?/g, '\n')
    .trimEnd()
  return createHash('sha256').update(normalized).digest('hex')
}

export interface NewProposal {
  skillMd: string
  skillId: string | null
  baseVersion: number | null
  runId: string | null
  createdBy: string | null
}

export async function insertProposal(db: Db, orgId: string, p: NewProposal): Promise<ProposalRow> {
  const [row] = await db
    .insert(skillProposals)
    .values({ id: newId(), orgId, ...p, contentSha256: contentHash(p.skillMd) })
    .returning()
  return row!
}

export async function getProposal(db: Db, orgId: string, id: string): Promise<ProposalRow | null> {
  const [row] = await db
    .select()
    .from(skillProposals)
    .where(and(eq(skillProposals.orgId, orgId), eq(skillProposals.id, id)))
  return row ?? null
}

/** The open or rejected proposal with this content, if any (a run does not propose either again). */
export async function sameContent(db: Db, orgId: string, skillMd: string): Promise<ProposalRow | null> {
  const [row] = await db
    .select()
    .from(skillProposals)
    .where(
      and(
        eq(skillProposals.orgId, orgId),
        eq(skillProposals.contentSha256, contentHash(skillMd)),
        sql`${skillProposals.state} <> 'accepted'`
      )
    )
    .orderBy(desc(skillProposals.id))
    .limit(1)
  return row ?? null
}

/** Proposals newest first, optionally in one state or for one skill. */
export async function listProposals(
  db: Db,
  orgId: string,
  q: { state?: SkillProposalState | undefined; skillId?: string | undefined; limit: number; cursor: string | undefined }
) {
  const list = keyset(skillProposals.id, 'desc', q)
  const rows = await db
    .select()
    .from(skillProposals)
    .where(
      and(
        eq(skillProposals.orgId, orgId),
        q.state ? eq(skillProposals.state, q.state) : undefined,
        q.skillId ? eq(skillProposals.skillId, q.skillId) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

export type DecisionRefusal =
  | { refused: 'missing' }
  | { refused: 'not_open'; state: SkillProposalState }
  | { refused: 'skill_gone' }
  | { refused: 'stale'; current: number }
  | { refused: 'name_taken'; name: string }
  | { refused: 'invalid' }

/**
 * Accepts an open proposal in one transaction: the skill it names becomes the next version
 * when that skill is still at `baseVersion`, or a new skill is made; the proposal is
 * `accepted`. Any refusal changes nothing.
 */
export async function acceptProposal(
  db: Db,
  orgId: string,
  id: string,
  decidedBy: string | null
): Promise<{ proposal: ProposalRow; skill: SkillRow } | DecisionRefusal> {
  class Refusal extends Error {
    readonly refusal: DecisionRefusal
    constructor(refusal: DecisionRefusal) {
      super(refusal.refused)
      this.refusal = refusal
    }
  }
  try {
    return await db.transaction(async (tx) => {
      const [proposal] = await tx
        .select()
        .from(skillProposals)
        .where(and(eq(skillProposals.orgId, orgId), eq(skillProposals.id, id)))
        .for('update')
      if (!proposal) throw new Refusal({ refused: 'missing' })
      if (proposal.state !== 'open') throw new Refusal({ refused: 'not_open', state: proposal.state })
      const parsed = parseSkillMd(proposal.skillMd)
      if (!parsed.ok) throw new Refusal({ refused: 'invalid' })
      let skill: SkillRow | undefined
      if (proposal.skillId !== null) {
        const [current] = await tx
          .select()
          .from(skills)
          .where(and(eq(skills.orgId, orgId), eq(skills.id, proposal.skillId)))
          .for('update')
        if (!current) throw new Refusal({ refused: 'skill_gone' })
        if (proposal.baseVersion !== null && current.version !== proposal.baseVersion)
          throw new Refusal({ refused: 'stale', current: current.version })
        ;[skill] = await tx
          .update(skills)
          .set({ ...parsed.skill, version: sql`${skills.version} + 1`, updatedAt: sql`now()` })
          .where(eq(skills.id, current.id))
          .returning()
      } else {
        ;[skill] = await tx
          .insert(skills)
          .values({
            id: newId(),
            orgId,
            ...parsed.skill,
            source: { kind: 'manual' },
            createdBy: decidedBy
          })
          .returning()
      }
      const [decided] = await tx
        .update(skillProposals)
        .set({ state: 'accepted', skillId: skill!.id, decidedAt: sql`now()`, decidedBy })
        .where(eq(skillProposals.id, proposal.id))
        .returning()
      return { proposal: decided!, skill: skill! }
    })
  } catch (err) {
    if (err instanceof Refusal) return err.refusal
    if (isUniqueViolation(err)) {
      const proposal = await getProposal(db, orgId, id)
      const parsed = proposal ? parseSkillMd(proposal.skillMd) : null
      return { refused: 'name_taken', name: parsed?.ok ? parsed.skill.name : '' }
    }
    throw err
  }
}

/** Rejects an open proposal. */
export async function rejectProposal(
  db: Db,
  orgId: string,
  id: string,
  decidedBy: string | null
): Promise<ProposalRow | DecisionRefusal> {
  const [row] = await db
    .update(skillProposals)
    .set({ state: 'rejected', decidedAt: sql`now()`, decidedBy })
    .where(and(eq(skillProposals.orgId, orgId), eq(skillProposals.id, id), eq(skillProposals.state, 'open')))
    .returning()
  if (row) return row
  const existing = await getProposal(db, orgId, id)
  return existing ? { refused: 'not_open', state: existing.state } : { refused: 'missing' }
}
