import { and, asc, eq, inArray, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { inUseWhenReferenced, isForeignKeyViolation } from '../db/faults.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import type { FinishedRun, FollowUpRun } from '../runs/ports/skills.js'
import { skillRun } from './skills-repo.js'
import { playbookRuns, playbooks, playbookSteps, skills, type PlaybookRunStep } from './tables.js'

export type PlaybookRow = typeof playbooks.$inferSelect
export interface StepInput {
  skillId: string
  input: string
}
export type PlaybookWithSteps = PlaybookRow & { steps: StepInput[] }

export function playbookToWire(p: PlaybookWithSteps) {
  return {
    id: p.id,
    name: p.name,
    description: p.description,
    steps: p.steps.map(({ skillId, input }) => ({ skillId, input })),
    createdAt: isoOf(p.createdAt),
    updatedAt: isoOf(p.updatedAt),
    createdBy: p.createdBy
  }
}

/** The positions of steps whose skill is not one of the org's (answered as 404 by the route). */
async function foreignSteps(tx: Tx, orgId: string, steps: StepInput[]): Promise<number[]> {
  const ids = [...new Set(steps.map((s) => s.skillId))]
  const found = new Set(
    (
      await tx
        .select({ id: skills.id })
        .from(skills)
        .where(and(eq(skills.orgId, orgId), inArray(skills.id, ids)))
        .for('share')
    ).map((r) => r.id)
  )
  return steps.flatMap((s, i) => (found.has(s.skillId) ? [] : [i]))
}

async function writeSteps(tx: Tx, orgId: string, playbookId: string, steps: StepInput[]): Promise<void> {
  await tx.delete(playbookSteps).where(eq(playbookSteps.playbookId, playbookId))
  await tx
    .insert(playbookSteps)
    .values(steps.map((s, position) => ({ playbookId, position, orgId, skillId: s.skillId, input: s.input })))
}

/** A missing skill, by step position: nothing was written. */
export type MissingSkill = { missingStep: number }

class Missing extends Error {
  readonly step: number
  constructor(step: number) {
    super('missing skill')
    this.step = step
  }
}

async function inTransaction<T>(db: Db, work: (tx: Tx) => Promise<T>): Promise<T | MissingSkill> {
  try {
    return await db.transaction(work)
  } catch (err) {
    if (err instanceof Missing) return { missingStep: err.step }
    // a skill deleted between the check and the insert
    if (isForeignKeyViolation(err)) return { missingStep: -1 }
    throw err
  }
}

export async function createPlaybook(
  db: Db,
  orgId: string,
  p: { name: string; description: string; steps: StepInput[] },
  createdBy: string | null
): Promise<PlaybookWithSteps | MissingSkill> {
  return inTransaction(db, async (tx) => {
    const missing = await foreignSteps(tx, orgId, p.steps)
    if (missing.length > 0) throw new Missing(missing[0]!)
    const [row] = await tx
      .insert(playbooks)
      .values({ id: newId(), orgId, name: p.name, description: p.description, createdBy })
      .returning()
    await writeSteps(tx, orgId, row!.id, p.steps)
    return { ...row!, steps: p.steps }
  })
}

async function stepsOf(db: Db | Tx, ids: string[]): Promise<Map<string, StepInput[]>> {
  const out = new Map<string, StepInput[]>(ids.map((id) => [id, []]))
  if (ids.length === 0) return out
  const rows = await db
    .select()
    .from(playbookSteps)
    .where(inArray(playbookSteps.playbookId, ids))
    .orderBy(asc(playbookSteps.playbookId), asc(playbookSteps.position))
  for (const r of rows) out.get(r.playbookId)!.push({ skillId: r.skillId, input: r.input })
  return out
}

export async function getPlaybook(db: Db | Tx, orgId: string, id: string): Promise<PlaybookWithSteps | null> {
  const [row] = await db
    .select()
    .from(playbooks)
    .where(and(eq(playbooks.orgId, orgId), eq(playbooks.id, id)))
  if (!row) return null
  return { ...row, steps: (await stepsOf(db, [row.id])).get(row.id)! }
}

export async function listPlaybooks(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const list = keyset(playbooks.id, 'desc', q)
  const rows = await db
    .select()
    .from(playbooks)
    .where(and(eq(playbooks.orgId, orgId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  const page = list.page(rows)
  const steps = await stepsOf(
    db,
    page.items.map((p) => p.id)
  )
  return { items: page.items.map((p) => ({ ...p, steps: steps.get(p.id)! })), nextCursor: page.nextCursor }
}

export async function updatePlaybook(
  db: Db,
  orgId: string,
  id: string,
  change: { name?: string | undefined; description?: string | undefined; steps?: StepInput[] | undefined }
): Promise<PlaybookWithSteps | MissingSkill | null> {
  return inTransaction(db, async (tx) => {
    const [row] = await tx
      .update(playbooks)
      .set({
        ...(change.name !== undefined ? { name: change.name } : {}),
        ...(change.description !== undefined ? { description: change.description } : {}),
        updatedAt: sql`now()`
      })
      .where(and(eq(playbooks.orgId, orgId), eq(playbooks.id, id)))
      .returning()
    if (!row) return null
    if (change.steps) {
      const missing = await foreignSteps(tx, orgId, change.steps)
      if (missing.length > 0) throw new Missing(missing[0]!)
      await writeSteps(tx, orgId, id, change.steps)
    }
    return { ...row, steps: change.steps ?? (await stepsOf(tx, [id])).get(id)! }
  })
}

/** Deletes a playbook; `in_use` while an automation runs it (a foreign key refuses). */
export async function deletePlaybook(db: Db, orgId: string, id: string): Promise<boolean | 'in_use'> {
  const rows = await inUseWhenReferenced(
    db
      .delete(playbooks)
      .where(and(eq(playbooks.orgId, orgId), eq(playbooks.id, id)))
      .returning({ id: playbooks.id })
  )
  return rows === 'in_use' ? rows : rows.length === 1
}

/**
 * What a playbook run will do, fixed now: each step's skill at its current version, its
 * instructions and tools, and the step's prompt (the step's input, then the run's input).
 * Each step also sees the earlier steps' answers, as the thread's earlier turns. Null when
 * a step's skill is gone.
 */
export async function snapshotSteps(
  db: Db | Tx,
  orgId: string,
  playbook: PlaybookWithSteps,
  input: string | undefined
): Promise<PlaybookRunStep[] | null> {
  const ids = [...new Set(playbook.steps.map((s) => s.skillId))]
  const rows = await db
    .select({
      id: skills.id,
      name: skills.name,
      version: skills.version,
      instructions: skills.instructions,
      allowedTools: skills.allowedTools
    })
    .from(skills)
    .where(and(eq(skills.orgId, orgId), inArray(skills.id, ids)))
  const byId = new Map(rows.map((r) => [r.id, r]))
  const out: PlaybookRunStep[] = []
  for (const step of playbook.steps) {
    const skill = byId.get(step.skillId)
    if (!skill) return null
    const stepInput = [step.input, input ?? ''].filter((part) => part.trim() !== '').join('\n\n')
    const run = skillRun(skill, stepInput)
    out.push({
      skillId: skill.id,
      skillVersion: skill.version,
      prompt: run.prompt,
      instructions: run.instructions,
      ...(run.tools ? { tools: run.tools } : {})
    })
  }
  return out
}

/** Run metadata of a playbook step (`{skillId, skillVersion}` plus where it stands). */
export const stepMetadata = (playbookId: string, index: number, step: PlaybookRunStep) => ({
  playbookId,
  playbookStep: index,
  skillId: step.skillId,
  skillVersion: step.skillVersion
})

/** Stored with the first step's run, in its transaction. */
export async function insertPlaybookRun(
  tx: Tx,
  row: {
    rootRunId: string
    orgId: string
    playbookId: string
    steps: PlaybookRunStep[]
    engine: string
    model: string | null
  }
): Promise<void> {
  await tx.insert(playbookRuns).values({ ...row, currentStep: 0, currentRunId: row.rootRunId })
}

/**
 * In the transaction that finished a run: when it was a playbook's current step and it
 * succeeded, the next step's run, parented on it. The conditional UPDATE moves the
 * playbook on only for the run it started itself, so a step starts once, whichever
 * instance finishes the run, and a run merely carrying the metadata starts nothing.
 */
export async function nextPlaybookStep(tx: Tx, run: FinishedRun): Promise<FollowUpRun[]> {
  if (run.status !== 'succeeded' || typeof run.metadata.playbookId !== 'string') return []
  const id = newId()
  const [moved] = await tx
    .update(playbookRuns)
    .set({ currentStep: sql`${playbookRuns.currentStep} + 1`, currentRunId: id })
    .where(
      and(
        eq(playbookRuns.rootRunId, run.rootRunId),
        eq(playbookRuns.orgId, run.orgId),
        eq(playbookRuns.currentRunId, run.id),
        sql`${playbookRuns.currentStep} + 1 < jsonb_array_length(${playbookRuns.steps})`
      )
    )
    .returning()
  if (!moved) return []
  const step = moved.steps[moved.currentStep]!
  return [
    {
      id,
      orgId: run.orgId,
      rootRunId: run.rootRunId,
      parentRunId: run.id,
      prompt: step.prompt,
      engine: moved.engine,
      model: moved.model,
      instructions: step.instructions ?? null,
      settings: { ...step.settings, ...(step.tools ? { tools: step.tools } : {}) },
      origin: 'skill',
      metadata: stepMetadata(moved.playbookId, moved.currentStep, step),
      userId: run.userId
    }
  ]
}
