import type { FastifyInstance } from 'fastify'
import skillsRoutes from '../../src/skills/index.js'
import type { TestDatabase, Teardown } from '../helper.js'
import { buildRunsApp, type RunsGroupOptions } from '../runs/group.js'

/**
 * The skills group: skills, proposals, playbooks and skill runs. A skill run and a playbook
 * step are runs, which the tests watch run (the echo engine), so the runs group comes with
 * it, with what running a run stands on (test/runs/group.ts); nothing else of the app.
 */
export function buildSkillsApp(
  t: Teardown,
  options: Pick<RunsGroupOptions, 'env' | 'db'> = {}
): Promise<FastifyInstance & { testDb: TestDatabase }> {
  return buildRunsApp(t, { ...options, routes: [skillsRoutes] })
}
