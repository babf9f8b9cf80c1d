import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Config } from '../config.js'
import { echoEngine } from './engines/echo.js'
import { openAiEngine } from './engines/openai.js'
import { EngineRegistry } from './engines/registry.js'
import { createRunEventSink, EventBatcher } from './events.js'
import { noRunMemory, type RunEventSink, type RunMemory } from './memory-port.js'
import { RunWorker } from './worker.js'

declare module 'fastify' {
  interface FastifyInstance {
    runEngines: EngineRegistry
    runWorker: RunWorker
    /** for the memory side: store and publish an event of a run (`memory.captured`) */
    runEventSink: RunEventSink
    /** events written outside a transaction, batched (group commit) */
    runEvents: EventBatcher
  }
}

export interface RunsRuntimeOptions {
  config: Config
  memory?: RunMemory
}

export function createEngines(config: Config): EngineRegistry {
  return new EngineRegistry([
    echoEngine({ wordDelayMs: config.ECHO_WORD_DELAY_MS }),
    openAiEngine({
      baseUrl: config.OPENAI_BASE_URL,
      apiKey: config.OPENAI_API_KEY,
      models: config.MODELS.split(',').map((m) => m.trim()).filter(Boolean),
      timeoutMs: config.OPENAI_TIMEOUT_MS,
      probeTtlMs: config.OPENAI_PROBE_TTL_MS,
      maxToolRounds: config.OPENAI_MAX_TOOL_ROUNDS
    })
  ])
}

/**
 * The instance-wide side of runs: engines (and their `/api/config` catalog), the worker
 * that starts with the app and drains on close, and the event sink for the memory side.
 */
export default fp(async function runsRuntime(app: FastifyInstance, opts: RunsRuntimeOptions) {
  const { config } = opts
  const engines = createEngines(config)
  app.features.catalogs.push(() => engines.catalog())
  const events = new EventBatcher(app.db)
  const worker = new RunWorker({
    db: app.db,
    events,
    bus: app.eventBus,
    engines,
    memory: opts.memory ?? noRunMemory,
    log: app.log.child({ component: 'run-worker' }),
    concurrency: config.RUN_WORKER_CONCURRENCY,
    pollMs: config.RUN_POLL_MS,
    leaseMs: config.RUN_LEASE_MS,
    sweepMs: config.RUN_SWEEP_MS,
    retentionDays: config.RUN_EVENTS_RETENTION_DAYS
  })
  app.decorate('runEngines', engines)
  app.decorate('runWorker', worker)
  app.decorate('runEvents', events)
  app.decorate('runEventSink', createRunEventSink(app.db))
  app.addHook('onReady', async () => {
    // the runtime registers after runs: its gateway is handed to engines once everything is loaded
    worker.setTools(app.hasDecorator('runtime') && app.features.capabilities.toolGateway ? app.runtime.gateway : null)
    worker.start()
  })
  app.addHook('preClose', async () => {
    await worker.close(config.SHUTDOWN_GRACE_MS)
  })
}, { name: 'runs-runtime', fastify: '5.x', dependencies: ['db', 'event-bus', 'features'] })
