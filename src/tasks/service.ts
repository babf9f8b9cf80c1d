import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { RunFollowUps } from '../runs/ports/skills.js'
import { finishTaskRun } from './tasks-repo.js'

/** The tasks group's instance-wide side, as `app.tasks`. */
export interface TasksService {
  /** a task whose run succeeded moves to done, in the transaction that finished the run */
  forFollowUps: RunFollowUps
}

declare module 'fastify' {
  interface FastifyInstance {
    tasks: TasksService
  }
}

/** The tasks service: what the board does when a task's run finishes. */
export default fp(
  async function tasksService(app: FastifyInstance) {
    app.decorate('tasks', {
      forFollowUps: {
        afterFinish: finishTaskRun,
        concerns: (run) => run.status === 'succeeded' && typeof run.metadata.taskId === 'string'
      }
    } satisfies TasksService)
  },
  { name: 'tasks', fastify: '5.x', dependencies: ['db'] }
)
