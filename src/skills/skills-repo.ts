import { and, eq, sql } from 'drizzle-orm'
import type { Db, Tx } from '../db/client.js'
import { inUseWhenReferenced, isUniqueViolation } from '../db/faults.js'
import { newId } from '../db/ids.js'
import { keyset } from '../db/paging.js'
import { isoOf } from '../db/rows.js'
import type { SkillFields } from './skill-md.js'
import { skills, type SkillSource } from './tables.js'
import { TOOL_NAMES } from '../../schemas/runtime.js'

export type SkillRow = typeof skills.$inferSelect

export function skillToWire(s: SkillRow) {
  return {
    id: s.id,
    name: s.name,
    description: s.description,
    instructions: s.instructions,
    license: s.license,
    compatibility: s.compatibility,
    allowedTools: s.allowedTools,
    metadata: s.metadata,
    version: s.version,
    source: s.source,
    createdAt: isoOf(s.createdAt),
    updatedAt: isoOf(s.updatedAt),
    createdBy: s.createdBy,
    warnings: skillTools(s.allowedTools).warnings
  }
}

/** The fields of a stored skill, as the SKILL.md parser and renderer see them. */
export function fieldsOf(s: SkillRow): SkillFields {
  return {
    name: s.name,
    description: s.description,
    instructions: s.instructions,
    license: s.license,
    compatibility: s.compatibility,
    allowedTools: s.allowedTools,
    metadata: s.metadata
  }
}

/** Why a write was refused: the name is another skill's, or the version moved on. */
export type SkillWriteRefusal = 'name_taken' | 'stale' | 'missing'

/** Creates version 1; `name_taken` when another skill of the org has the name. */
export async function insertSkill(
  db: Db | Tx,
  orgId: string,
  fields: SkillFields,
  source: SkillSource,
  createdBy: string | null
): Promise<SkillRow | 'name_taken'> {
  try {
    const [row] = await db
      .insert(skills)
      .values({ id: newId(), orgId, ...fields, source, createdBy })
      .returning()
    return row!
  } catch (err) {
    if (isUniqueViolation(err)) return 'name_taken'
    throw err
  }
}

export async function getSkill(db: Db | Tx, orgId: string, id: string): Promise<SkillRow | null> {
  const [row] = await db
    .select()
    .from(skills)
    .where(and(eq(skills.orgId, orgId), eq(skills.id, id)))
  return row ?? null
}

/** Skills of the org, newest first. */
export async function listSkills(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const list = keyset(skills.id, 'desc', q)
  const rows = await db
    .select()
    .from(skills)
    .where(and(eq(skills.orgId, orgId), list.after))
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
}

/**
 * The next version, when `version` is the current one: one conditional UPDATE, so of two
 * writers with the same version exactly one wins.
 */
export async function updateSkill(
  db: Db | Tx,
  orgId: string,
  id: string,
  fields: SkillFields,
  version: number,
  source?: SkillSource
): Promise<SkillRow | SkillWriteRefusal> {
  try {
    const [row] = await db
      .update(skills)
      .set({ ...fields, ...(source ? { source } : {}), version: sql`${skills.version} + 1`, updatedAt: sql`now()` })
      .where(and(eq(skills.orgId, orgId), eq(skills.id, id), eq(skills.version, version)))
      .returning()
    if (row) return row
  } catch (err) {
    if (isUniqueViolation(err)) return 'name_taken'
    throw err
  }
  return (await getSkill(db, orgId, id)) ? 'stale' : 'missing'
}

/** The skills of the org imported from a repository, oldest first. */
export async function skillsImportedFrom(db: Db | Tx, orgId: string, repo: string): Promise<SkillRow[]> {
  return db
    .select()
    .from(skills)
    .where(
      and(
        eq(skills.orgId, orgId),
        sql`${skills.source}->>'kind' = 'github'`,
        sql`lower(${skills.source}->>'repo') = lower(${repo})`
      )
    )
    .orderBy(skills.id)
}

/** Deletes a skill; `in_use` when a playbook step still runs it. */
export async function deleteSkill(db: Db, orgId: string, id: string): Promise<boolean | 'in_use'> {
  const rows = await inUseWhenReferenced(
    db
      .delete(skills)
      .where(and(eq(skills.orgId, orgId), eq(skills.id, id)))
      .returning({ id: skills.id })
  )
  return rows === 'in_use' ? rows : rows.length === 1
}

/**
 * A skill run: the skill's instructions as the system message, the input as
 * the prompt (without one, a request to run the skill), and `allowed-tools` as the tools
 * it may use.
 */
export function skillRun(
  skill: { name: string; instructions: string; allowedTools: string[] },
  input: string | undefined
): { prompt: string; instructions: string | null; tools: string[] | undefined } {
  const given = input?.trim() ? input : `Run the skill ${skill.name}.`
  return {
    prompt: given,
    instructions: skill.instructions.trim() === '' ? null : skill.instructions,
    tools: skillTools(skill.allowedTools).tools
  }
}

/** Agent Skills' common tool names (Claude Code's) and the Cairn tool each stands for. */
const TOOL_ALIASES: Record<string, string> = {
  Bash: 'shell',
  Read: 'read_file',
  Write: 'write_file',
  Edit: 'write_file',
  MultiEdit: 'write_file',
  Glob: 'list_files',
  LS: 'list_files'
}

/**
 * What a skill's `allowed-tools` lets its runs use: Cairn's tool names and the common
 * aliases (`Bash` → shell, `Read` → read_file, `Write`/`Edit` → write_file, `Glob`/`LS` →
 * list_files; an argument pattern such as `Bash(git:*)` is not enforced, only the tool).
 * Other names are kept in the skill and reported as warnings. No `allowed-tools`: every
 * tool (`undefined`).
 */
export function skillTools(allowed: string[]): { tools: string[] | undefined; warnings: string[] } {
  if (allowed.length === 0) return { tools: undefined, warnings: [] }
  const known = new Set<string>(TOOL_NAMES)
  const tools = new Set<string>()
  const warnings: string[] = []
  for (const name of allowed) {
    const base = name.replace(/\(.*\)$/, '')
    const tool = known.has(base) ? base : TOOL_ALIASES[base]
    if (!tool) {
      warnings.push(
        `allowed-tools names ${JSON.stringify(name)}, which Cairn does not have: runs of this skill do not get it`
      )
      continue
    }
    tools.add(tool)
    if (base !== name)
      warnings.push(`allowed-tools names ${JSON.stringify(name)}: runs get ${tool}, without its argument pattern`)
  }
  return { tools: [...tools], warnings }
}

/** The skill's instructions, then the caller's after a blank line, as a run body field. */
export function joinedInstructions(skill: string | null, caller: string | undefined): { instructions?: string } {
  const joined = [skill, caller]
    .filter((part): part is string => typeof part === 'string' && part.trim() !== '')
    .join('\n\n')
  return joined === '' ? {} : { instructions: joined }
}

/** The tools a skill run may use: the skill's, cut to the caller's when it names some (a run body field). */
export function narrowedTools(skill: string[] | undefined, caller: string[] | undefined): { tools?: string[] } {
  if (skill === undefined) return caller === undefined ? {} : { tools: caller }
  return { tools: caller === undefined ? skill : skill.filter((tool) => caller.includes(tool)) }
}
