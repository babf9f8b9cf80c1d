import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { conflict, validationFailed } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import { errorResponses, IdempotencyKeyHeader } from '../../schemas/common.js'
import { RunEnvelope } from '../../schemas/runs.js'
import {
  CreatePlaybookBody,
  IdParams,
  ListSkillsQuery,
  PlaybookEnvelope,
  PlaybookPage,
  RunPlaybookBody,
  UpdatePlaybookBody
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
import { missingStep, noPlaybook } from './skill-requests.js'
import { agentOptionsOf } from '../runs/agent-options.js'
import { joinedInstructions, narrowedTools } from './skills-repo.js'

const PLAYBOOKS = ['playbooks']

/** Playbooks, skills run one after another: /playbooks and their runs. */
const playbooksRoutes: FastifyPluginAsyncTypebox = async (app) => {
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

export default playbooksRoutes
