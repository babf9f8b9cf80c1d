import { and, eq, sql, type SQL } from 'drizzle-orm'
import { LRUCache } from 'lru-cache'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Db } from '../db/client.js'
import type { RunFollowUps, RunSkills } from '../runs/ports/skills.js'
import type { AutomationTargets } from '../automations/targets-port.js'
import { getPlaybook, insertPlaybookRun, nextPlaybookStep, snapshotSteps, stepMetadata } from './playbooks-repo.js'
import { insertProposal, sameContent } from './proposals-repo.js'
import { parseSkillMd, skillMdLocation, type SkillProblem } from './skill-md.js'
import { getSkill, insertSkill, skillRun, skillsImportedFrom, updateSkill, type SkillRow } from './skills-repo.js'
import type { GitHubSkillSource, SkillImport, SkillImports } from '../github/ports.js'
import { skills } from './tables.js'

/** The skills group's instance-wide side, as `app.skills`. */
export interface SkillsService {
  /** the runs group's port: what a run proposes */
  forRuns: RunSkills
  /** the next step of a playbook, started in the transaction that finished the previous one */
  forFollowUps: RunFollowUps
  /**
   * What a skill run needs of a skill (its instructions at a version), from a per-instance
   * cache: a run is stored only while the skill is still at that version (checked in the
   * statement that stores it), so a stale entry costs a retry, never a wrong prompt.
   */
  runnable(orgId: string, skillId: string, fresh?: boolean): Promise<RunnableSkill | null>
  /** the runs an automation's skill or playbook target starts (the automations group's port) */
  forAutomations: AutomationTargets
  /** SKILL.md files imported from a GitHub repository (the github group's port) */
  forImport: SkillImports
}

export interface RunnableSkill {
  id: string
  name: string
  instructions: string
  allowedTools: string[]
  version: number
}

/** The condition a skill run is stored under: the skill still exists at the version its prompt came from. */
export const stillAt = (orgId: string, skill: RunnableSkill): SQL =>
  sql`exists (select 1 from skills where id = ${skill.id} and org_id = ${orgId} and version = ${skill.version})`

declare module 'fastify' {
  interface FastifyInstance {
    skills: SkillsService
  }
}

/** Problems of a SKILL.md in one line each, for a run's tool result. */
export const describeProblems = (problems: SkillProblem[]) =>
  problems
    .map((p) => (p.line ? `line ${p.line}, column ${p.column ?? 1}: ${p.message}` : `${p.path}: ${p.message}`))
    .join('; ')

/**
 * The skill a proposal changes: the one named by id, else the org's skill of the same
 * name (a run rarely knows ids), else none (a new skill). `missing` when an id names nothing.
 */
export async function targetOf(
  db: Db,
  orgId: string,
  skillId: string | undefined,
  name: string
): Promise<SkillRow | null | 'missing'> {
  if (skillId !== undefined) return (await getSkill(db, orgId, skillId)) ?? 'missing'
  const [byName] = await db
    .select()
    .from(skills)
    .where(and(eq(skills.orgId, orgId), eq(skills.name, name)))
  return byName ?? null
}

/** The skill imported from this folder of this repository before, if any. */
async function importedFrom(db: Db, orgId: string, source: GitHubSkillSource): Promise<SkillRow | null> {
  const folder = skillMdLocation(source.path).folder
  const rows = await skillsImportedFrom(db, orgId, source.repo)
  return rows.find((row) => row.source.kind === 'github' && skillMdLocation(row.source.path).folder === folder) ?? null
}

/**
 * Skill import: the skill imported from the same folder of the same
 * repository is the same skill. The same commit again is no new version; another commit is
 * the next version (its SKILL.md may rename the skill). A name held by another skill is a
 * refusal, never an overwrite. Concurrent imports settle on one skill: a lost race is
 * looked up again.
 */
async function importSkill(
  db: Db,
  orgId: string,
  skillMd: string,
  source: GitHubSkillSource,
  createdBy: string | null
): Promise<SkillImport> {
  const parsed = parseSkillMd(skillMd)
  if (!parsed.ok) return { outcome: 'invalid', problems: parsed.problems }
  const fields = parsed.skill
  for (let attempt = 0; attempt < 3; attempt++) {
    const earlier = await importedFrom(db, orgId, source)
    if (earlier) {
      if (earlier.source.kind === 'github' && earlier.source.commit === source.commit)
        return { outcome: 'unchanged', skill: earlier }
      const updated = await updateSkill(db, orgId, earlier.id, fields, earlier.version, source)
      if (updated === 'name_taken') return { outcome: 'name_taken', name: fields.name }
      if (typeof updated !== 'string') return { outcome: 'updated', skill: updated }
      continue // changed or deleted meanwhile: look again
    }
    const created = await insertSkill(db, orgId, fields, source, createdBy)
    if (created !== 'name_taken') return { outcome: 'created', skill: created }
    // a concurrent import of this folder got there first (look again), or another skill has the name
    if (!(await importedFrom(db, orgId, source))) return { outcome: 'name_taken', name: fields.name }
  }
  return { outcome: 'name_taken', name: fields.name }
}

/** The skills service: the port runs propose skills through, and the playbook follow-up. */
export default fp(
  async function skillsService(app: FastifyInstance) {
    const db = app.db
    const runnableCache = new LRUCache<string, RunnableSkill>({ max: 1000 })
    app.decorate('skills', {
      forRuns: {
        async propose(run, { skillMd, skillId }) {
          const parsed = parseSkillMd(skillMd)
          if (!parsed.ok) return { refused: `the SKILL.md is invalid: ${describeProblems(parsed.problems)}` }
          const target = await targetOf(db, run.orgId, skillId, parsed.skill.name)
          if (target === 'missing') return { refused: 'no such skill in this organization' }
          // content a person rejected is not proposed again; an open one is not doubled
          const same = await sameContent(db, run.orgId, skillMd)
          if (same?.state === 'rejected') return { refused: 'this exact SKILL.md was proposed before and rejected' }
          if (same?.state === 'open') return { proposalId: same.id, state: 'open' }
          const proposal = await insertProposal(db, run.orgId, {
            skillMd,
            skillId: target?.id ?? null,
            baseVersion: target?.version ?? null,
            runId: run.runId,
            createdBy: null
          })
          return { proposalId: proposal.id, state: 'open' }
        }
      },
      forFollowUps: {
        afterFinish: nextPlaybookStep,
        concerns: (run) => run.status === 'succeeded' && typeof run.metadata.playbookId === 'string'
      },
      forAutomations: {
        async skill(tx, orgId, skillId, input) {
          const skill = await getSkill(tx, orgId, skillId)
          if (!skill) return null
          const run = skillRun(skill, input)
          return {
            prompt: run.prompt,
            instructions: run.instructions,
            settings: run.tools ? { tools: run.tools } : {},
            metadata: { skillId: skill.id, skillVersion: skill.version }
          }
        },
        async playbook(tx, orgId, playbookId, input) {
          const playbook = await getPlaybook(tx, orgId, playbookId)
          const steps = playbook ? await snapshotSteps(tx, orgId, playbook, input) : null
          if (!playbook || !steps) return null
          const first = steps[0]!
          return {
            prompt: first.prompt,
            instructions: first.instructions ?? null,
            settings: first.tools ? { tools: first.tools } : {},
            metadata: stepMetadata(playbook.id, 0, first),
            started: (tx, run) =>
              insertPlaybookRun(tx, {
                rootRunId: run.id,
                orgId,
                playbookId: playbook.id,
                steps,
                engine: run.engine,
                model: run.model
              })
          }
        },
        async exists(db, orgId, target) {
          return 'skillId' in target
            ? (await getSkill(db, orgId, target.skillId)) !== null
            : (await getPlaybook(db, orgId, target.playbookId)) !== null
        }
      },
      forImport: {
        importSkill: (orgId, skillMd, source, createdBy) => importSkill(db, orgId, skillMd, source, createdBy)
      },
      async runnable(orgId, skillId, fresh = false) {
        const key = `${orgId}:${skillId}`
        const cached = fresh ? undefined : runnableCache.get(key)
        if (cached) return cached
        const skill = await getSkill(db, orgId, skillId)
        if (!skill) {
          runnableCache.delete(key)
          return null
        }
        const entry = {
          id: skill.id,
          name: skill.name,
          instructions: skill.instructions,
          allowedTools: skill.allowedTools,
          version: skill.version
        }
        runnableCache.set(key, entry)
        return entry
      }
    } satisfies SkillsService)
  },
  { name: 'skills', fastify: '5.x', dependencies: ['db'] }
)
