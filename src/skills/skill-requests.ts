import type { Static } from 'typebox'
import { conflict, notFound, validationFailed } from '../../plugins/errors.js'
import type { CreateSkillBody } from '../../schemas/skills.js'
import type { MissingSkill } from './playbooks-repo.js'
import type { DecisionRefusal } from './proposals-repo.js'
import {
  checkSkillFields,
  normalizeInstructions,
  parseSkillMd,
  type SkillFields,
  type SkillProblem
} from './skill-md.js'

// What the skills routes make of a request (a skill from its fields or its SKILL.md, every
// problem at once), and the catalogue errors they answer with.

type FieldsBody = Omit<Static<typeof CreateSkillBody>, 'skillMd'>

/** The fields sent (not a file) over a base: what the skill will be; every problem at once. */
function skillFromFields(body: FieldsBody, base: SkillFields | null): SkillFields {
  const fields: SkillFields = {
    name: body.name ?? base?.name ?? '',
    description: body.description ?? base?.description ?? '',
    instructions: normalizeInstructions(body.instructions ?? base?.instructions ?? ''),
    license: body.license !== undefined ? body.license : (base?.license ?? null),
    compatibility: body.compatibility !== undefined ? body.compatibility : (base?.compatibility ?? null),
    allowedTools: body.allowedTools ?? base?.allowedTools ?? [],
    metadata: body.metadata ?? base?.metadata ?? {}
  }
  const problems = checkSkillFields(fields)
  if (problems.length > 0) throw validationFailed(problems.map(inBody))
  return fields
}

/** A SKILL.md sent as text: its fields, or a 400 listing every problem with its line and column. */
export function skillFromFile(skillMd: string): SkillFields {
  const parsed = parseSkillMd(skillMd)
  if (!parsed.ok) throw validationFailed(parsed.problems.map(inBody))
  return parsed.skill
}

/** Problem paths as the schema validator writes them (`/body/skillMd`, `/body/name`). */
const inBody = (p: SkillProblem): SkillProblem => ({ ...p, path: `/body${p.path}` })

export function skillFromBody(body: Static<typeof CreateSkillBody>, base: SkillFields | null): SkillFields {
  const { skillMd, ...fields } = body
  if (skillMd === undefined) return skillFromFields(fields, base)
  const extra = Object.keys(fields).filter((k) => k !== 'version')
  if (extra.length > 0)
    throw validationFailed(
      extra.map((k) => ({ path: `/body/${k}`, message: 'send either skillMd or the fields, not both' }))
    )
  return skillFromFile(skillMd)
}

export const nameTaken = (name: string) => conflict(`a skill named ${JSON.stringify(name)} exists in this organization`)
export const noSkill = () => notFound('no such skill in this organization')
export const noPlaybook = () => notFound('no such playbook in this organization')
export const missingStep = (m: MissingSkill) =>
  notFound(
    m.missingStep >= 0
      ? `no such skill in this organization (steps/${m.missingStep}/skillId)`
      : "a step's skill was deleted meanwhile"
  )

export function refusal(r: DecisionRefusal): Error {
  switch (r.refused) {
    case 'missing':
      return notFound('no such skill proposal in this organization')
    case 'not_open':
      return conflict(`the proposal is ${r.state}, not open`)
    case 'skill_gone':
      return conflict('the skill this proposal changes was deleted')
    case 'stale':
      return conflict(`the skill is at version ${r.current}, not the proposal's base version; propose again against it`)
    case 'name_taken':
      return nameTaken(r.name)
    case 'invalid':
      return conflict('the proposal is not a valid SKILL.md under the current rules')
  }
}
