import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import type { Static } from 'typebox'
import { conflict, notFound } from '../../plugins/errors.js'
import type { IdempotencyLock, StoredAnswer } from '../../plugins/idempotency/index.js'
import type { RunSkillBody } from '../../schemas/skills.js'
import type { Principal } from '../auth/principal.js'
import { agentOptionsOf } from '../runs/agent-options.js'
import { RunPreconditionFailed } from '../runs/dispatch.js'
import { stillAt } from './service.js'
import { joinedInstructions, narrowedTools, skillRun } from './skills-repo.js'

/**
 * `POST /api/skills/:id/run` as the caller: the route and the MCP tool `run_skill` both
 * start a skill's run through this. The skill's instructions are the system message, the
 * input the prompt, its `allowed-tools` cut the caller's tools.
 */
export async function dispatchSkillRun(
  app: FastifyInstance,
  input: {
    principal: Principal
    skillId: string
    body: Static<typeof RunSkillBody> | null
    idempotency: IdempotencyLock | null
    log: FastifyBaseLogger
  }
): Promise<StoredAnswer> {
  const { principal } = input
  const { input: skillInput, rootRunId, engine, model, instructions, tools, ...settings } = input.body ?? {}
  // the caller's own tool names are checked before the skill's cut them
  agentOptionsOf({ tools })
  // the cached skill first; a skill changed meanwhile is read again, once
  for (let attempt = 0; attempt < 2; attempt++) {
    const skill = await app.skills.runnable(principal.orgId, input.skillId, attempt > 0)
    if (!skill) throw notFound('no such skill in this organization')
    const run = skillRun(skill, skillInput)
    try {
      return await app.runs.dispatch({
        principal,
        body: {
          prompt: run.prompt,
          engine,
          model,
          rootRunId,
          metadata: { skillId: skill.id, skillVersion: skill.version },
          ...settings,
          // the caller's instructions follow the skill's; its tools are cut to the skill's
          ...joinedInstructions(run.instructions, instructions),
          ...narrowedTools(run.tools, tools)
        },
        origin: 'skill',
        precondition: stillAt(principal.orgId, skill),
        idempotency: input.idempotency,
        log: input.log
      })
    } catch (err) {
      if (!(err instanceof RunPreconditionFailed)) throw err
    }
  }
  throw conflict('the skill changed while the run was starting; retry')
}
