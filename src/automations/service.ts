import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.js'
import type { AutomationRuns } from '../runs/ports/automations.js'
import { AutomationScheduler } from './scheduler.js'
import type { Clock } from '../worker-loop.js'
import type { AutomationTargets } from './targets-port.js'

/** The automations group's instance-wide side, as `app.automations`. */
export interface AutomationsService {
  scheduler: AutomationScheduler
  /** the time automations are scheduled by (the system's, or a test's) */
  clock: Clock
  runs: AutomationRuns
  targets: AutomationTargets
}

declare module 'fastify' {
  interface FastifyInstance {
    automations: AutomationsService
  }
}

/** The variables the automations service reads: a read of another is a type error. */
export type AutomationsConfig = Pick<Config, 'SCHEDULER' | 'SCHEDULER_POLL_MS' | 'SCHEDULER_GRACE_MS'>

export interface AutomationsServiceOptions {
  config: AutomationsConfig
  clock: Clock
  runs: AutomationRuns
  targets: AutomationTargets
}

/** The automations scheduler, in every instance unless SCHEDULER=false. */
export default fp(
  async function automationsService(app: FastifyInstance, opts: AutomationsServiceOptions) {
    const { config, clock, runs, targets } = opts
    const scheduler = new AutomationScheduler({
      db: app.db,
      clock,
      runs,
      targets,
      log: app.log.child({ component: 'scheduler' }),
      pollMs: config.SCHEDULER_POLL_MS,
      graceMs: config.SCHEDULER_GRACE_MS,
      batch: 500
    })
    app.decorate('automations', { scheduler, clock, runs, targets } satisfies AutomationsService)
    app.addHook('onReady', async () => {
      if (config.SCHEDULER) scheduler.start()
    })
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the scheduler', (ms) => scheduler.stop(ms))
    })
  },
  { name: 'automations', fastify: '5.x', dependencies: ['db', 'runs', 'shutdown-refusals'] }
)
