import type { FastifyInstance } from 'fastify'
import artifactsService from '../../src/artifacts/service.js'
import automationsRoutes from '../../src/automations/index.js'
import automationsService from '../../src/automations/service.js'
import { forAutomations } from '../../src/runs/ports/automations.js'
import runsService from '../../src/runs/service.js'
import skillsRoutes from '../../src/skills/index.js'
import skillsService from '../../src/skills/service.js'
import type { Env } from '../../src/config.js'
import type { Clock } from '../../src/worker-loop.js'
import { absentGroup, buildGroupApp } from '../group-app.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * The automations group with what it stands on: the runs service (its engines, the queued runs
 * it inserts and announces; its worker off), the artifacts service (a prompt's attachments)
 * and the skills service and routes (skill and playbook targets): the same services and options
 * `buildApp` wires, the rest left out.
 */
export async function buildAutomationsApp(
  t: Teardown,
  options: { clock: Clock; env?: Partial<Record<keyof Env, string>>; db?: TestDatabase }
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  if (options.env?.RUN_WORKER_CONCURRENCY !== '0')
    throw new Error('the automations group app runs no run: RUN_WORKER_CONCURRENCY=0, or buildTestApp')
  return buildGroupApp(t, {
    db: options.db,
    env: options.env,
    services: async (app, config) => {
      // a prompt target's attachments are uploads (the routes check them through app.artifacts)
      await app.register(artifactsService, { config })
      await app.register(skillsService)
      await app.register(runsService, {
        config,
        memory: absentGroup('memory', 'the automations group app'),
        tools: null,
        artifacts: app.artifacts.forRuns,
        knowledge: absentGroup('knowledge', 'the automations group app'),
        skills: app.skills.forRuns,
        followUps: [app.skills.forFollowUps],
        secrets: absentGroup('secrets', 'the automations group app')
      })
      await app.register(automationsService, {
        config,
        clock: options.clock,
        runs: forAutomations(app.runs, app.log.child({ component: 'scheduler' })),
        targets: app.skills.forAutomations
      })
    },
    routes: [skillsRoutes, automationsRoutes]
  })
}

/** A clock the test moves: no sleeping through hours. */
export class FakeClock implements Clock {
  private ms: number
  constructor(iso: string) {
    this.ms = Date.parse(iso)
  }
  now() {
    return new Date(this.ms)
  }
  set(iso: string | number) {
    this.ms = typeof iso === 'number' ? iso : Date.parse(iso)
  }
}

/** no scheduler timer and no run worker: a test fires by moving its clock */
export const QUIET = { SCHEDULER: 'false', RUN_WORKER_CONCURRENCY: '0' }

export async function create(app: FastifyInstance, headers: Record<string, string>, body: Record<string, unknown>) {
  const res = await app.inject({
    method: 'POST',
    url: '/api/automations',
    headers,
    payload: { name: 'job', target: { prompt: 'tick' }, ...body }
  })
  if (res.statusCode !== 201) throw new Error(`create: ${res.statusCode} ${res.body}`)
  return res.json().automation
}

/** Moves the clock from `from` to `to` in steps, letting the scheduler fire at each. */
export async function tickThrough(
  apps: FastifyInstance[],
  clock: FakeClock,
  from: string,
  to: string,
  stepMs = 60_000
) {
  for (let at = Date.parse(from); at <= Date.parse(to); at += stepMs) {
    clock.set(at)
    await Promise.all(apps.map((app) => app.automations.scheduler.fireDue()))
  }
}

export const firesOf = async (app: FastifyInstance, headers: Record<string, string>, id: string): Promise<string[]> =>
  (await app.inject({ method: 'GET', url: `/api/automations/${id}/fires?limit=200`, headers }))
    .json()
    .items.map((f: { scheduledFor: string }) => f.scheduledFor)
    .reverse()
