import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { conflict } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import { errorResponses, IdempotencyKeyHeader } from '../../schemas/common.js'
import { RunEnvelope } from '../../schemas/runs.js'
import {
  CreateSkillBody,
  IdParams,
  ListSkillsQuery,
  RunSkillBody,
  SkillEnvelope,
  SkillPage,
  UpdateSkillBody
} from '../../schemas/skills.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { renderSkillMd } from './skill-md.js'
import { nameTaken, noSkill, skillFromBody } from './skill-requests.js'
import { dispatchSkillRun } from './run-skill.js'
import { deleteSkill, fieldsOf, getSkill, insertSkill, listSkills, skillToWire, updateSkill } from './skills-repo.js'

const SKILLS = ['skills']
const SkillMdResponse = {
  description: 'the skill as a SKILL.md file',
  content: { 'text/markdown': { schema: Type.String() } }
}

/** Skills (Agent Skills SKILL.md) and skill runs: /skills, /skills/:id, its SKILL.md and its runs. */
const skillsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/skills',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createSkill',
        tags: SKILLS,
        summary: 'Create a skill from a SKILL.md (`skillMd`) or from its fields (version 1)',
        description: 'Creates a skill, either parsed from a SKILL.md or from its separate fields, as version 1.',
        body: CreateSkillBody,
        response: { 201: SkillEnvelope, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const fields = skillFromBody(request.body, null)
      const skill = await insertSkill(app.db, principal.orgId, fields, { kind: 'manual' }, realUserId(principal))
      if (skill === 'name_taken') throw nameTaken(fields.name)
      return reply.code(201).send({ skill: skillToWire(skill) })
    }
  )

  app.get(
    '/skills',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listSkills',
        tags: SKILLS,
        summary: 'Skills of the org, newest first',
        description: "Pages through the organization's skills, newest first.",
        querystring: ListSkillsQuery,
        response: { 200: SkillPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listSkills(app.db, orgId, { limit: request.query.limit ?? 50, cursor: request.query.cursor })
      return { items: page.items.map(skillToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/skills/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getSkill',
        tags: SKILLS,
        summary: 'One skill',
        description: 'Returns one skill at its current version.',
        params: IdParams,
        response: { 200: SkillEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const skill = await getSkill(app.db, orgId, request.params.id)
      if (!skill) throw noSkill()
      return { skill: skillToWire(skill) }
    }
  )

  app.get(
    '/skills/:id/skill.md',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getSkillFile',
        tags: SKILLS,
        summary: 'The skill as a SKILL.md (front matter and instructions); parsing it gives the same skill',
        description:
          'Renders the skill as a SKILL.md file (YAML front matter and instructions) that parses back to the same skill.',
        params: IdParams,
        response: { 200: SkillMdResponse, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const skill = await getSkill(app.db, orgId, request.params.id)
      if (!skill) throw noSkill()
      return reply
        .type('text/markdown; charset=utf-8')
        .header('content-disposition', 'inline; filename="SKILL.md"')
        .send(renderSkillMd(fieldsOf(skill)))
    }
  )

  app.patch(
    '/skills/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updateSkill',
        tags: SKILLS,
        summary:
          'The next version: a whole `skillMd`, or the fields sent; `version` must be the current one (409 otherwise)',
        description:
          "Writes a skill's next version from a whole SKILL.md or from the fields sent, when the version sent is the current one.",
        params: IdParams,
        body: UpdateSkillBody,
        response: { 200: SkillEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const { version, ...body } = request.body
      const current = await getSkill(app.db, orgId, request.params.id)
      if (!current) throw noSkill()
      const fields = skillFromBody(body, fieldsOf(current))
      const result = await updateSkill(app.db, orgId, current.id, fields, version)
      if (result === 'missing') throw noSkill()
      if (result === 'stale')
        throw conflict(`version ${version} is not the skill's current version; read it again and retry`)
      if (result === 'name_taken') throw nameTaken(fields.name)
      return { skill: skillToWire(result) }
    }
  )

  app.delete(
    '/skills/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteSkill',
        tags: SKILLS,
        summary: 'Delete a skill (409 while a playbook has it as a step)',
        description: 'Deletes a skill, unless a playbook still uses it as a step.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const result = await deleteSkill(app.db, orgId, request.params.id)
      if (result === 'in_use')
        throw conflict('a playbook step or an automation uses this skill; change or delete it first')
      if (!result) throw noSkill()
      return reply.code(204).send(null)
    }
  )

  app.post(
    '/skills/:id/run',
    {
      config: { idempotent: true, keyAccess: 'dispatch' },
      schema: {
        operationId: 'runSkill',
        tags: SKILLS,
        summary:
          'Run a skill: its instructions are the system message, `input` the prompt, `allowed-tools` the tools it may use; honours Idempotency-Key',
        description:
          "Starts a run with the skill's instructions as its system message, the input as its prompt and only the tools the skill allows.",
        headers: IdempotencyKeyHeader,
        params: IdParams,
        // every field is optional, and so is the body itself
        body: Type.Union([RunSkillBody, Type.Null()]),
        response: { 201: RunEnvelope, ...errorResponses(404, 429) }
      }
    },
    async (request, reply) => {
      const answer = await dispatchSkillRun(app, {
        principal: principalOf(request),
        skillId: request.params.id,
        body: request.body,
        idempotency: request.idempotency,
        log: request.log
      })
      return sendStored(reply, answer)
    }
  )
}

export default skillsRoutes
