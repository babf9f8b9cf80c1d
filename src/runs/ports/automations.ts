import type { FastifyBaseLogger } from 'fastify'
import type { Tx } from '../../db/client.js'
import type { RunSettings } from '../tables.js'
import type { EngineRegistry } from '../engines/registry.js'
import type { EventBatcher } from '../events.js'
import { announceCommitted, getRun, insertThreadRoots, runToWire } from '../runs-repo.js'

/**
 * What automations need of the runs group: the engine a prompt names, queued runs stored in a transaction, announced
 * after it.
 */
export interface AutomationRuns {
  /** the engine and model a run of this request gets (an unknown one is kept: the worker fails the run, saying why) */
  engineFor(
    tx: Tx,
    orgId: string,
    engine: string | undefined,
    model: string | undefined
  ): Promise<{ engine: string; model: string | null }>
  /** why a run of this engine and model cannot start in the org now (as `POST /api/runs` would refuse it), else null */
  unavailable(orgId: string, engine: string | undefined, model: string | undefined): Promise<string | null>
  insert(tx: Tx, rows: QueuedRun[]): Promise<QueuedRun[]>
  /** a run just inserted, as the runs routes answer it (`{run}`) */
  envelopeOf(tx: Tx, orgId: string, id: string): Promise<{ run: unknown }>
  /** never throws: a run.queued not stored now is left to the runs sweeper */
  announce(runs: QueuedRun[]): Promise<void>
}

export interface QueuedRun {
  id: string
  orgId: string
  /** its own id: each run an automation starts is a new thread */
  rootRunId: string
  engine: string
  model: string | null
  prompt: string
  origin: 'automation'
  metadata: Record<string, unknown>
  userId: string | null
  instructions?: string | null | undefined
  settings?: RunSettings | undefined
  attachments?: string[] | undefined
}

/**
 * The runs group's side of the automations port: engines, queued runs in the caller's transaction, their announcement.
 */
export function forAutomations(
  runs: { engines: EngineRegistry; events: EventBatcher },
  log: FastifyBaseLogger
): AutomationRuns {
  return {
    async engineFor(tx, orgId, engine, model) {
      // the org's providers' models too, like POST /api/runs, read in the caller's transaction
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
