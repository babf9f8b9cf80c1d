import { agentOptionsOf } from '../runs/agent-options.js'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import { Type } from 'typebox'
import { conflict, engineUnavailable, notFound, validationFailed } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import {
  AutomationEnvelope,
  AutomationFirePage,
  AutomationPage,
  CreateAutomationBody,
  ListAutomationsQuery,
  UpdateAutomationBody
} from '../../schemas/automations.js'
import { errorResponses, IdempotencyKeyHeader, IdParams, PageQuery, StrictObject } from '../../schemas/common.js'
import { RunEnvelope } from '../../schemas/runs.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { isForeignKeyViolation } from '../db/faults.js'
import {
  automationToWire,
  createAutomation,
  deleteAutomation,
  fireToWire,
  getAutomation,
  listAutomations,
  listFires,
  updateAutomation,
  type AutomationInput
} from './automations-repo.js'
import { scheduleProblem } from './cron.js'
import { planRun } from './scheduler.js'
import type { AutomationTarget } from './tables.js'

const AUTOMATIONS = ['automations']
const noAutomation = () => notFound('no such automation in this organization')

/** A write whose target skill or playbook was deleted after it was checked: the foreign key refuses it, a 404. */
async function whileTargetExists<T>(writing: Promise<T>): Promise<T> {
  try {
    return await writing
  } catch (err) {
    if (isForeignKeyViolation(err)) throw notFound("the target's skill or playbook was deleted meanwhile")
    throw err
  }
}

/** Scheduled automations; reads are open to API keys, a trigger honours Idempotency-Key. */
const automationsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { clock, runs, targets, scheduler } = app.automations

  /** A schedule that can fire and a target the org has, or the 4xx saying why. */
  async function checked(
    orgId: string,
    a: Pick<AutomationInput, 'cron' | 'timezone'> & { target?: AutomationTarget | undefined }
  ): Promise<void> {
    const problem = scheduleProblem(a, clock.now())
    if (problem) throw validationFailed([problem])
    const target = a.target
    if (!target) return
    if ('prompt' in target) {
      const { attachments } = agentOptionsOf(target, '/body/target')
      const found = new Set((await app.artifacts.forRuns.uploadsOf(orgId, attachments)).map((u) => u.id))
      const missing = attachments.find((id) => !found.has(id))
      if (missing !== undefined)
        throw notFound(`no upload ${JSON.stringify(missing)} in this organization (target.attachments)`)
      const unavailable = await runs.unavailable(orgId, target.engine, target.model)
      if (unavailable !== null) throw engineUnavailable(unavailable)
    } else if (!(await targets.exists(app.db, orgId, target))) {
      throw notFound(`no such ${'skillId' in target ? 'skill' : 'playbook'} in this organization (target)`)
    }
  }

  app.post(
    '/automations',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createAutomation',
        tags: AUTOMATIONS,
        summary: 'Create an automation: a cron in a time zone that starts a run of a prompt, a skill or a playbook',
        description:
          'Creates an automation that starts a run of a prompt, a skill or a playbook on a cron schedule in a time zone.',
        body: CreateAutomationBody,
        response: { 201: AutomationEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const b = request.body
      const input: AutomationInput = {
        name: b.name,
        cron: b.cron.trim(),
        timezone: b.timezone ?? 'UTC',
        target: b.target,
        enabled: b.enabled ?? true,
        catchUp: b.catchUp ?? 'latest'
      }
      await checked(principal.orgId, input)
      const now = clock.now()
      const row = await whileTargetExists(
        createAutomation(app.db, principal.orgId, { ...input, createdBy: realUserId(principal) }, now)
      )
      scheduler.wake()
      return reply.code(201).send({ automation: automationToWire(row, now) })
    }
  )

  app.get(
    '/automations',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listAutomations',
        tags: AUTOMATIONS,
        summary: 'Automations of the org, newest first',
        description: "Pages through the organization's automations, newest first.",
        querystring: ListAutomationsQuery,
        response: { 200: AutomationPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listAutomations(app.db, orgId, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      const now = clock.now()
      return { items: page.items.map((a) => automationToWire(a, now)), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/automations/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getAutomation',
        tags: AUTOMATIONS,
        summary: 'One automation, with its next five fire times',
        description: 'Returns one automation with its next five fire times.',
        params: IdParams,
        response: { 200: AutomationEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const row = await getAutomation(app.db, orgId, request.params.id)
      if (!row) throw noAutomation()
      return { automation: automationToWire(row, clock.now()) }
    }
  )

  app.patch(
    '/automations/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updateAutomation',
        tags: AUTOMATIONS,
        summary: 'Change an automation; disabling it stops it on every instance at once',
        description:
          "Changes an automation's schedule, target or state; disabling it stops it on every instance at once.",
        params: IdParams,
        body: UpdateAutomationBody,
        response: { 200: AutomationEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const current = await getAutomation(app.db, principal.orgId, request.params.id)
      if (!current) throw noAutomation()
      const change: Partial<AutomationInput> = {
        ...request.body,
        ...(request.body.cron !== undefined ? { cron: request.body.cron.trim() } : {})
      }
      await checked(principal.orgId, {
        cron: change.cron ?? current.cron,
        timezone: change.timezone ?? current.timezone,
        target: change.target
      })
      const now = clock.now()
      const row = await whileTargetExists(updateAutomation(app.db, principal.orgId, current, change, now))
      if (!row) throw noAutomation()
      scheduler.wake()
      return { automation: automationToWire(row, now) }
    }
  )

  app.delete(
    '/automations/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteAutomation',
        tags: AUTOMATIONS,
        summary: 'Delete an automation and its fire history; its runs stay',
        description: 'Deletes an automation and its fire history, leaving the runs it started.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await deleteAutomation(app.db, orgId, request.params.id))) throw noAutomation()
      return reply.code(204).send(null)
    }
  )

  app.post(
    '/automations/:id/trigger',
    {
      config: { idempotent: true, keyAccess: 'none' },
      schema: {
        operationId: 'triggerAutomation',
        tags: AUTOMATIONS,
        summary: "Start the automation's run now (metadata.scheduledFor null); not a fire. Honours Idempotency-Key",
        description: "Starts the automation's run right away, outside its schedule, and answers with the run.",
        headers: IdempotencyKeyHeader,
        params: IdParams,
        body: Type.Union([StrictObject({}), Type.Null()]),
        response: { 201: RunEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const idempotency = request.idempotency
      const { answer, run } = await app.db.transaction(async (tx) => {
        const automation = await getAutomation(tx, orgId, request.params.id)
        if (!automation) throw noAutomation()
        const plan = await planRun(tx, { runs, targets }, automation, null)
        if (!plan) throw conflict("the automation's skill or playbook was deleted meanwhile")
        await runs.insert(tx, [plan.row])
        await plan.started?.(tx, plan.row)
        const wire = await runs.envelopeOf(tx, orgId, plan.row.id)
        return {
          run: plan.row,
          answer: idempotency
            ? await idempotency.complete(tx, 201, wire)
            : { status: 201, payload: JSON.stringify(wire) }
        }
      })
      await runs.announce([run])
      return sendStored(reply, answer)
    }
  )

  app.get(
    '/automations/:id/fires',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listAutomationFires',
        tags: AUTOMATIONS,
        summary: 'The ticks an automation fired, latest first, each with its run',
        description: 'Pages through the times an automation fired, latest first, each with the run it started.',
        params: IdParams,
        querystring: StrictObject({ ...PageQuery }),
        response: { 200: AutomationFirePage, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      if (!(await getAutomation(app.db, orgId, request.params.id))) throw noAutomation()
      const page = await listFires(app.db, orgId, request.params.id, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(fireToWire), nextCursor: page.nextCursor }
    }
  )
}

// started only where the services it uses are: a group app without them fails at boot, naming what is missing
export default fp(automationsRoutes, {
  name: 'automations-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'automations', 'artifacts'],
  encapsulate: true
})
