import type { FastifyBaseLogger } from 'fastify'
import type { AutomationRuns } from '../automations/scheduler.js'
import type { EngineRegistry } from './engines/registry.js'
import type { EventBatcher } from './events.js'
import { announceCommitted, getRun, insertThreadRoots, runToWire } from './runs-repo.js'

/**
 * The runs group's side of the automations port: engines, queued runs in the caller's transaction, their announcement.
 */
export function automationRuns(
  runs: { engines: EngineRegistry; events: EventBatcher },
  log: FastifyBaseLogger
): AutomationRuns {
  return {
    async engineFor(tx, orgId, engine, model) {
      // the org's providers' models too (contract 11), like POST /api/runs, read in the caller's transaction
      const chosen = await runs.engines.resolve(engine, model, orgId, tx)
      // an engine gone since the automation was saved: the run is kept and fails, saying why
      if ('error' in chosen) return { engine: engine ?? 'echo', model: model ?? null }
      return { engine: chosen.engine.id, model: chosen.model }
    },
    async unavailable(orgId, engine, model) {
      const chosen = await runs.engines.resolve(engine, model, orgId)
      return 'error' in chosen ? chosen.error : null
    },
    insert: (tx, rows) => insertThreadRoots(tx, rows),
    async envelopeOf(tx, orgId, id) {
      const run = await getRun(tx, orgId, id)
      if (!run) throw new Error(`run ${id} is not in its transaction`)
      return { run: runToWire(run) }
    },
    announce: (rows) => announceCommitted(runs.events, rows, log)
  }
}
