import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { conflict, validationFailed } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import { errorResponses, IdempotencyKeyHeader } from '../../schemas/common.js'
import { RunEnvelope } from '../../schemas/runs.js'
import {
  AcceptedProposal,
  CreatePlaybookBody,
  CreateProposalBody,
  CreateSkillBody,
  IdParams,
  ListProposalsQuery,
  ListSkillsQuery,
  PlaybookEnvelope,
  PlaybookPage,
  ProposalEnvelope,
  ProposalPage,
  RunPlaybookBody,
  RunSkillBody,
  SkillEnvelope,
  SkillPage,
  UpdatePlaybookBody,
  UpdateSkillBody
} from '../../schemas/skills.js'
import { principalOf, realUserId } from '../auth/principal.js'
import {
  createPlaybook,
  deletePlaybook,
  getPlaybook,
  insertPlaybookRun,
  listPlaybooks,
  playbookToWire,
  snapshotSteps,
  stepMetadata,
  updatePlaybook
} from './playbooks-repo.js'
import { acceptProposal, insertProposal, listProposals, proposalToWire, rejectProposal } from './proposals-repo.js'
import { targetOf } from './service.js'
import { renderSkillMd } from './skill-md.js'
import { missingStep, nameTaken, noPlaybook, noSkill, refusal, skillFromBody, skillFromFile } from './skill-requests.js'
import { agentOptionsOf } from '../runs/agent-options.js'
import { dispatchSkillRun } from './run-skill.js'
import {
  deleteSkill,
  fieldsOf,
  getSkill,
  insertSkill,
  joinedInstructions,
  listSkills,
  narrowedTools,
  skillToWire,
  updateSkill
} from './skills-repo.js'

const SKILLS = ['skills']
const PLAYBOOKS = ['playbooks']
const SkillMdResponse = {
  description: 'the skill as a SKILL.md file',
  content: { 'text/markdown': { schema: Type.String() } }
}

/** Skills (Agent Skills SKILL.md), skill runs, proposals and playbooks. */
const skillsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  // ---- skills -------------------------------------------------------------------

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

  // ---- proposals (static paths before /skills/:id) ------------------------------

  app.post(
    '/skills/proposals',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createSkillProposal',
        tags: SKILLS,
        summary:
          'Propose a SKILL.md: a new skill, or a change of `skillId` (or of the skill with its name) against `baseVersion`',
        description:
          'Records a proposed SKILL.md as an open proposal: a new skill, or a change to an existing skill against the version it was written from.',
        body: CreateProposalBody,
        response: { 201: ProposalEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { skillMd, skillId, baseVersion } = request.body
      const fields = skillFromFile(skillMd)
      const target = await targetOf(app.db, principal.orgId, skillId, fields.name)
      if (target === 'missing') throw noSkill()
      const proposal = await insertProposal(app.db, principal.orgId, {
        skillMd,
        skillId: target?.id ?? null,
        baseVersion: target ? (baseVersion ?? target.version) : null,
        runId: null,
        createdBy: realUserId(principal)
      })
      return reply.code(201).send({ proposal: proposalToWire(proposal) })
    }
  )

  app.get(
    '/skills/proposals',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listSkillProposals',
        tags: SKILLS,
        summary: 'Proposals, newest first; `state` and `skillId` filter',
        description: 'Pages through skill proposals, newest first, optionally by state or skill.',
        querystring: ListProposalsQuery,
        response: { 200: ProposalPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const q = request.query
      const page = await listProposals(app.db, orgId, {
        state: q.state,
        skillId: q.skillId,
        limit: q.limit ?? 50,
        cursor: q.cursor
      })
      return { items: page.items.map(proposalToWire), nextCursor: page.nextCursor }
    }
  )

  app.post(
    '/skills/proposals/:id/accept',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'acceptSkillProposal',
        tags: SKILLS,
        summary:
          "Accept an open proposal: the skill's next version (409 when it moved past `baseVersion`) or a new skill",
        description:
          "Applies an open proposal: the skill's next version, or a new skill, refused with 409 when the skill moved past the proposal's base version.",
        params: IdParams,
        response: { 200: AcceptedProposal, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const result = await acceptProposal(app.db, principal.orgId, request.params.id, realUserId(principal))
      if ('refused' in result) throw refusal(result)
      return { proposal: proposalToWire(result.proposal), skill: skillToWire(result.skill) }
    }
  )

  app.post(
    '/skills/proposals/:id/reject',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'rejectSkillProposal',
        tags: SKILLS,
        summary: 'Reject an open proposal; a run does not propose the same content again',
        description:
          'Closes an open proposal without changing the skill, and remembers its content so runs do not propose it again.',
        params: IdParams,
        response: { 200: ProposalEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const result = await rejectProposal(app.db, principal.orgId, request.params.id, realUserId(principal))
      if ('refused' in result) throw refusal(result)
      return { proposal: proposalToWire(result) }
    }
  )

  // ---- one skill ----------------------------------------------------------------

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

  // ---- playbooks ----------------------------------------------------------------

  app.post(
    '/playbooks',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createPlaybook',
        tags: PLAYBOOKS,
        summary: 'Create a playbook: skill steps run one after the other in one thread',
        description:
          "Creates a playbook: an ordered list of skills that run one after another in one thread, each step seeing the previous one's output.",
        body: CreatePlaybookBody,
        response: { 201: PlaybookEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { name, description, steps } = request.body
      const playbook = await createPlaybook(
        app.db,
        principal.orgId,
        {
          name,
          description: description ?? '',
          steps: steps.map((s) => ({ skillId: s.skillId, input: s.input ?? '' }))
        },
        realUserId(principal)
      )
      if ('missingStep' in playbook) throw missingStep(playbook)
      return reply.code(201).send({ playbook: playbookToWire(playbook) })
    }
  )

  app.get(
    '/playbooks',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listPlaybooks',
        tags: PLAYBOOKS,
        summary: 'Playbooks of the org, newest first',
        description: "Pages through the organization's playbooks, newest first.",
        querystring: ListSkillsQuery,
        response: { 200: PlaybookPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listPlaybooks(app.db, orgId, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(playbookToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/playbooks/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getPlaybook',
        tags: PLAYBOOKS,
        summary: 'One playbook',
        description: 'Returns one playbook with its steps.',
        params: IdParams,
        response: { 200: PlaybookEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const playbook = await getPlaybook(app.db, orgId, request.params.id)
      if (!playbook) throw noPlaybook()
      return { playbook: playbookToWire(playbook) }
    }
  )

  app.patch(
    '/playbooks/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updatePlaybook',
        tags: PLAYBOOKS,
        summary: 'Change a playbook; `steps` replaces them all (runs under way keep the steps they started with)',
        description:
          'Renames or re-describes a playbook or replaces its steps; runs already under way keep the steps they started with.',
        params: IdParams,
        body: UpdatePlaybookBody,
        response: { 200: PlaybookEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const { steps, ...rest } = request.body
      const result = await updatePlaybook(app.db, orgId, request.params.id, {
        ...rest,
        steps: steps?.map((s) => ({ skillId: s.skillId, input: s.input ?? '' }))
      })
      if (!result) throw noPlaybook()
      if ('missingStep' in result) throw missingStep(result)
      return { playbook: playbookToWire(result) }
    }
  )

  app.delete(
    '/playbooks/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deletePlaybook',
        tags: PLAYBOOKS,
        summary: 'Delete a playbook (runs under way finish their steps); 409 while an automation runs it',
        description: 'Deletes a playbook, unless an automation runs it; runs under way finish their steps.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const result = await deletePlaybook(app.db, orgId, request.params.id)
      if (result === 'in_use') throw conflict('an automation runs this playbook; change or delete the automation first')
      if (!result) throw noPlaybook()
      return reply.code(204).send(null)
    }
  )

  app.post(
    '/playbooks/:id/run',
    {
      config: { idempotent: true, keyAccess: 'dispatch' },
      schema: {
        operationId: 'runPlaybook',
        tags: PLAYBOOKS,
        summary:
          "Run a playbook: answers the first step's run, the root of a thread in which each next step starts when the previous one succeeded",
        description:
          "Starts the playbook's first step as a run and answers with it; each later step starts in the same thread when the previous one succeeds.",
        headers: IdempotencyKeyHeader,
        params: IdParams,
        body: Type.Union([RunPlaybookBody, Type.Null()]),
        response: { 201: RunEnvelope, ...errorResponses(404, 429) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const playbook = await getPlaybook(app.db, principal.orgId, request.params.id)
      if (!playbook) throw noPlaybook()
      const { input, engine, model, instructions, tools, attachments, ...rest } = request.body ?? {}
      // checked once here; every step then takes them
      const {
        settings: { tools: _checked, ...settings }
      } = agentOptionsOf({ tools, ...rest })
      const snapshot = await snapshotSteps(app.db, principal.orgId, playbook, input)
      if (!snapshot) throw conflict("a step's skill was deleted meanwhile; read the playbook again")
      const steps = snapshot.map((step) => ({
        ...step,
        ...joinedInstructions(step.instructions ?? null, instructions),
        ...narrowedTools(step.tools, tools),
        ...(Object.keys(settings).length > 0 ? { settings } : {})
      }))
      const empty = steps.findIndex((s) => s.prompt === '')
      if (empty >= 0)
        throw validationFailed([
          {
            path: '/body/input',
            message: `step ${empty}'s skill has no instructions and the step no input: send an input`
          }
        ])
      const first = steps[0]!
      const answer = await app.runs.dispatch({
        principal,
        body: {
          prompt: first.prompt,
          engine,
          model,
          metadata: stepMetadata(playbook.id, 0, first),
          ...(first.instructions ? { instructions: first.instructions } : {}),
          ...(first.tools ? { tools: first.tools } : {}),
          ...rest,
          ...(attachments ? { attachments } : {})
        },
        origin: 'skill',
        idempotency: request.idempotency,
        log: request.log,
        attach: async (tx, run) => {
          await insertPlaybookRun(tx, {
            rootRunId: run.id,
            orgId: principal.orgId,
            playbookId: playbook.id,
            steps,
            engine: run.engine,
            model: run.model
          })
          return {}
        }
      })
      return sendStored(reply, answer)
    }
  )
}

export default skillsRoutes
