import type { FastifyInstance } from 'fastify'
import type { RunThreadContext } from './ports/thread-context.js'
import fp from 'fastify-plugin'
import type { StoredAnswer } from '../../plugins/idempotency/index.js'
import type { Clock } from '../worker-loop.js'
import type { Config } from '../config.js'
import type { Db, Tx } from '../db/client.js'
import { chatEngine, dispatchRun, type DispatchInput } from './dispatch.js'
import { echoEngine } from './engines/echo.js'
import { anthropicEngine } from './engines/anthropic.js'
import { openAiEngine } from './engines/openai.js'
import { providerEngine } from './engines/provider.js'
import type { OrgProviders } from './ports/providers.js'
import { EngineRegistry } from './engines/registry.js'
import { ModelBreakers } from './engines/breaker.js'
import type { Engine } from './engines/types.js'
import { EventBatcher } from './events.js'
import type { RunArtifacts } from './ports/artifacts.js'
import type { RunKnowledge } from './ports/knowledge.js'
import type { RunMemory } from './ports/memory.js'
import type { RunSecrets } from './ports/secrets.js'
import type { RunJobs } from './ports/jobs.js'
import type { RunFollowUps, RunSkills } from './ports/skills.js'
import { cancelRun, type OnRunsEnded, type RunRow } from './runs-repo.js'
import { realUserIdOfRun } from './run-ref.js'
import { RunSweeper } from './sweeper.js'
import { OutputChecker } from './output-check.js'
import type { ToolGatewayPort } from './ports/tool-gateway.js'
import { dropToolCalls, RunWorker } from './worker.js'
import { countRunEnded } from '../telemetry/runs.js'

/** The runs group's instance-wide side, as `app.runs`. */
export interface RunsService {
  engines: EngineRegistry
  /** claims and executes queued runs on this instance */
  worker: RunWorker
  /** fails lost runs, announces unannounced ones, prunes old events */
  sweeper: RunSweeper
  /** events written outside a transaction, batched (group commit) */
  events: EventBatcher
  /** `POST /api/runs` (src/runs/dispatch.ts) */
  dispatch(input: DispatchInput): Promise<StoredAnswer>
  /** asks a run to stop; null when the org has no such run */
  cancel(orgId: string, runId: string): Promise<RunRow | null>
  /** the engine and model `POST /api/chat` uses (the org's providers' models included) */
  chatEngine(orgId: string, model: string | undefined): Promise<{ engine: Engine; model: string | null }>
  /** checks runs' outputs against their response formats in a thread of its own */
  outputCheck: OutputChecker
  /** simulates a crash of this instance's runs side (tests): nothing more is written */
  kill(): void
}

declare module 'fastify' {
  interface FastifyInstance {
    runs: RunsService
  }
}

/** The variables `createEngines` reads. */
export type EnginesConfig = Pick<
  Config,
  | 'OPENAI_TIMEOUT_MS'
  | 'OPENAI_MAX_TOOL_ROUNDS'
  | 'MODEL_RETRIES'
  | 'MODEL_RETRY_BASE_MS'
  | 'MODEL_BREAKER_OPEN_MS'
  | 'ECHO_WORD_DELAY_MS'
  | 'OPENAI_BASE_URL'
  | 'OPENAI_API_KEY'
  | 'MODELS'
  | 'OPENAI_PROBE_TTL_MS'
  | 'ANTHROPIC_BASE_URL'
  | 'ANTHROPIC_API_KEY'
  | 'ANTHROPIC_MODELS'
>

/** The variables the runs service reads (its engines' among them): a read of another is a type error. */
export type RunsConfig = EnginesConfig &
  Pick<
    Config,
    | 'RUN_OUTPUT_CHECK_TIMEOUT_MS'
    | 'RUN_WORKER_CONCURRENCY'
    | 'RUN_POLL_MS'
    | 'RUN_LEASE_MS'
    | 'MODEL_CONTEXT_TOKENS'
    | 'RUN_SWEEP_MS'
    | 'RUN_EVENTS_RETENTION_DAYS'
    | 'RUN_QUEUE_MAX_PER_ORG'
  >

export interface RunsServiceOptions {
  config: RunsConfig
  /** the Memory Hub side of runs (recall, capture) */
  memory: RunMemory
  /** the agent runtime's tool gateway; null: runs are offered no tools */
  tools: ToolGatewayPort | null
  /** where runs save files (the artifacts group) */
  artifacts: RunArtifacts
  /** where runs propose knowledge (the knowledge group) */
  knowledge: RunKnowledge
  /** where runs propose skills (the skills group) */
  skills: RunSkills
  /** what follows a finished run (the skills group's playbooks, the tasks group's board) */
  followUps: RunFollowUps[]
  /** the org secrets a run names (the secrets group) */
  secrets: RunSecrets
  /** the org's model providers, for models the deployment does not serve (the providers group) */
  providers?: OrgProviders | undefined
  /** runs that do a job of their own (the github group's repo wiki builds) */
  jobs?: RunJobs[] | undefined
  /** what chat platforms add to a run's context; the array is filled in as they register */
  threadContext?: RunThreadContext[] | undefined
  /** which MCP tool names the org's servers offer (a run's `tools`) */
  mcpTools?: ((orgId: string, names: string[]) => Promise<number>) | undefined
  /** where the sweeper measures retention from (tests move it) */
  clock?: Clock | undefined
}

export function createEngines(config: EnginesConfig, providers?: OrgProviders): EngineRegistry {
  const common = {
    timeoutMs: config.OPENAI_TIMEOUT_MS,
    maxToolRounds: config.OPENAI_MAX_TOOL_ROUNDS,
    retries: config.MODEL_RETRIES,
    retryBaseMs: config.MODEL_RETRY_BASE_MS,
    // one breaker per provider for the whole instance: runs, chat, Slack, automations, extraction
    breakers: new ModelBreakers(config.MODEL_BREAKER_OPEN_MS)
  }
  const orgEngine = providers
    ? async (orgId: string, model: string, db?: Db | Tx) => {
        const connection = await providers.offering(orgId, model, db)
        return connection ? providerEngine(connection, common) : null
      }
    : null
  const list = (value: string) =>
    value
      .split(',')
      .map((m) => m.trim())
      .filter(Boolean)
  return new EngineRegistry(
    [
      echoEngine({ wordDelayMs: config.ECHO_WORD_DELAY_MS }),
      openAiEngine({
        ...common,
        baseUrl: config.OPENAI_BASE_URL,
        apiKey: config.OPENAI_API_KEY,
        models: list(config.MODELS),
        probeTtlMs: config.OPENAI_PROBE_TTL_MS
      }),
      anthropicEngine({
        ...common,
        baseUrl: config.ANTHROPIC_BASE_URL ?? (config.ANTHROPIC_API_KEY ? 'https://api.anthropic.com' : undefined),
        apiKey: config.ANTHROPIC_API_KEY,
        models: list(config.ANTHROPIC_MODELS),
        probeTtlMs: config.OPENAI_PROBE_TTL_MS
      })
    ],
    orgEngine,
    providers ? (orgId, db) => providers.defaults(orgId, db) : null
  )
}

/**
 * The runs service: engines (and their `/api/config` catalog), dispatch, the worker that
 * starts with the app and hands its runs back on close, and the sweeper. Everything it uses arrives as
 * options or from the infrastructure plugins (db, event bus).
 */
export default fp(
  async function runsService(app: FastifyInstance, opts: RunsServiceOptions) {
    const { config, memory, tools, artifacts, knowledge, skills, followUps, secrets, providers, jobs } = opts
    const log = app.log.child({ component: 'runs' })
    const engines = createEngines(config, providers)
    const events = new EventBatcher(app.db)
    const outputCheck = new OutputChecker(config.RUN_OUTPUT_CHECK_TIMEOUT_MS)
    const worker = new RunWorker({
      db: app.db,
      outputCheck,
      events,
      bus: app.eventBus,
      engines,
      memory,
      tools,
      artifacts,
      knowledge,
      skills,
      followUps,
      secrets,
      jobs,
      log,
      concurrency: config.RUN_WORKER_CONCURRENCY,
      pollMs: config.RUN_POLL_MS,
      leaseMs: config.RUN_LEASE_MS,
      contextTokens: config.MODEL_CONTEXT_TOKENS,
      threadContext: opts.threadContext
    })
    // the facts a run remembered are captured however it ends, here when outside its worker
    const onEnded: OnRunsEnded = async (tx, ended) => {
      for (const run of ended) {
        countRunEnded(run, run.status)
        if (run.remembered && run.remembered.length > 0) {
          await memory.enqueueCapture(
            tx,
            { id: run.id, rootRunId: run.rootRunId, orgId: run.orgId, realUserId: realUserIdOfRun(run) },
            run.remembered
          )
        }
      }
    }
    const sweeper = new RunSweeper({
      db: app.db,
      events,
      tools,
      log,
      sweepMs: config.RUN_SWEEP_MS,
      retentionDays: config.RUN_EVENTS_RETENTION_DAYS,
      clock: opts.clock,
      onEnded
    })
    app.decorate('runs', {
      engines,
      worker,
      sweeper,
      events,
      outputCheck,
      dispatch: (input) =>
        dispatchRun(
          {
            db: app.db,
            engines,
            events,
            secrets,
            artifacts,
            onEnded,
            mcpTools: opts.mcpTools,
            queueMax: config.RUN_QUEUE_MAX_PER_ORG
          },
          input
        ),
      async cancel(orgId, runId) {
        const run = await cancelRun(app.db, orgId, runId, onEnded)
        // calls waiting for a person are dropped now, wherever the run runs: its worker stops
        // promptly; a run that waited for them is cancelled already
        if (run?.status === 'running' || run?.status === 'cancelled') await dropToolCalls(tools, log, orgId, run.id)
        return run
      },
      chatEngine: (orgId, model) => chatEngine(engines, orgId, model),
      kill() {
        worker.kill()
        sweeper.kill()
      }
    } satisfies RunsService)
    app.addHook('onReady', async () => {
      worker.start()
      sweeper.start()
    })
    // running runs are handed back at once, not waited for: a deploy must not fail them, and
    // the process must be gone within SHUTDOWN_GRACE_MS (half of it for the hand-backs)
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the run worker', (ms) => Promise.all([sweeper.stop(ms), worker.close(ms)]))
    })
    app.addHook('onClose', async () => {
      await outputCheck.close()
    })
  },
  { name: 'runs', fastify: '5.x', dependencies: ['db', 'event-bus', 'shutdown-refusals'] }
)
