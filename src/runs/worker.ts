import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyBaseLogger } from 'fastify'
import type { EventBus } from '../../plugins/event-bus.js'
import type { Db } from '../db/client.js'
import { realUserIdOfRun } from './run-ref.js'
import type { EngineRegistry } from './engines/registry.js'
import {
  EngineError,
  RunSuspended,
  type Engine,
  type EngineContext,
  type EngineResult,
  type RunTools,
  type ToolDefinition,
  type WireMessage
} from './engines/types.js'
import { prepareAttachments } from './attachments.js'
import { insertEvents, type EventBatcher, type NewEvent } from './events.js'
import { RunEventWriter } from './event-writer.js'
import { FinishAbandoned, FinishBatcher } from './finish-batcher.js'
import { extractionMessages, parseExtraction } from './extraction.js'
import type { RunArtifacts } from './ports/artifacts.js'
import type { RunKnowledge } from './ports/knowledge.js'
import type { RecalledItem, RunMemory, RunRef } from './ports/memory.js'
import type { SuspendedRun } from './tables.js'
import {
  announceCommitted,
  claimRuns,
  insertFollowUp,
  markFinished,
  releaseRun,
  renewLeases,
  suspendRun,
  type ClaimedRun,
  type RunOutcome,
  type RunRow
} from './runs-repo.js'
import type { FinishedRun, RunFollowUps, RunSkills } from './ports/skills.js'
import type { RunSecrets } from './ports/secrets.js'
import type { RunJob, RunJobs } from './ports/jobs.js'
import type { ToolGatewayPort } from './ports/tool-gateway.js'
import { RunHandedBack } from '../runtime/ports.js'
import type { RunThreadContext } from './ports/thread-context.js'
import { NO_SECRETS, Redactor, type StreamRedactor } from '../secrets/redact.js'
import { isDatabaseUnavailable } from '../db/faults.js'
import { backoffDelay, createWorkerLoop, LoopStopped, type WorkerLoop } from '../worker-loop.js'
import { observeRun, type ExecutionEnd } from '../telemetry/runs.js'
import { redactSpansWith } from '../telemetry/tracing.js'
import type { OutputChecker } from './output-check.js'
import {
  appendTranscript,
  earlierMessages,
  ownMessages,
  storeContextSizes,
  toTranscript,
  type TranscriptMessage
} from './transcripts.js'

/** the memory tool's name, offered only while the org's memory is on */
const REMEMBER_TOOL = 'remember'
/** Drops a run's waiting tool calls, if runs have tools; never throws (the run ends either way). */
export async function dropToolCalls(
  tools: ToolGatewayPort | null,
  log: FastifyBaseLogger,
  orgId: string,
  runId: string
): Promise<void> {
  if (!tools) return
  try {
    await tools.cancelRun(orgId, runId)
  } catch (err) {
    log.warn({ err, runId, orgId }, 'dropping waiting tool calls failed')
  }
}

export interface RunWorkerOptions {
  db: Db
  /** where a running engine's events go (batched; see EventBatcher) */
  events: EventBatcher
  bus: EventBus
  engines: EngineRegistry
  memory: RunMemory
  log: FastifyBaseLogger
  concurrency: number
  pollMs: number
  leaseMs: number
  /** the agent runtime's tool gateway; null: runs get no tools */
  tools: ToolGatewayPort | null
  /** where a run's files are saved (the artifacts group) */
  artifacts: RunArtifacts
  /** where a run's knowledge drafts go (the knowledge group) */
  knowledge: RunKnowledge
  /** where a run's skill proposals go (the skills group) */
  skills: RunSkills
  /** what follows a finished run, in its finishing transaction (playbook steps, tasks) */
  followUps: RunFollowUps[]
  /** the values of the secrets a run names */
  secrets: RunSecrets
  /** groups whose runs do a job of their own instead of answering a prompt (a repo wiki build) */
  jobs?: RunJobs[] | undefined
  /** checks a succeeded run's output against its response format, off the event loop */
  outputCheck: Pick<OutputChecker, 'check'>
  /** MODEL_CONTEXT_TOKENS: the thread's earlier turns sent with a run fit in this, with its instructions and prompt */
  contextTokens?: number | undefined
  /** what chat platforms add to a run's context (colleagues' messages in a Slack thread); filled in as they register */
  threadContext?: RunThreadContext[] | undefined
}

/**
 * Tokens estimated from UTF-8 bytes: 3 bytes a token errs on the safe side for English
 * (about 4 bytes a token) and for CJK scripts (3 bytes a character, about a token each).
 */
export const BYTES_PER_TOKEN = 3

/** Thrown into an engine whose instance was killed: nothing more may be written. */
class WorkerGone extends Error {
  override name = 'WorkerGone'
}
class CancelRequested extends Error {
  override name = 'CancelRequested'
}
/** A write of a run kept failing (the database away) until its lease ran out: the sweeper answers for the run. */
class LeaseLost extends Error {
  override name = 'LeaseLost'
}

/** Writes of a running run retried while the database is away: first wait, and the longest. */
const WRITE_RETRY_BASE_MS = 100
const WRITE_RETRY_MAX_MS = 2000

interface Active {
  run: RunRow
  controller: AbortController
  done: Promise<void>
  /** until when (this process's clock) the lease surely holds: the last claim or renewal sent, plus RUN_LEASE_MS */
  leaseUntil: number
  /**
   * where the run could go on from if handed back (the engine's last checkpoint, as stored JSON, and the tokens spent
   * to get there)
   */
  checkpoint?: { state: string; usage: Usage | null } | undefined
  /** how this execution left the worker, for its span and the run metrics (unset: killed or lost) */
  ended?: ExecutionEnd | undefined
  /** the run's transcript as far as the engine got (redacted), and how much of it is stored */
  transcript?: { messages: TranscriptMessage[]; written: number } | undefined
}

/** The org's memory switches, as settingsFor answers them. */
type MemorySettings = Awaited<ReturnType<RunMemory['settingsFor']>>

/**
 * One execution of a run, as its steps share it: where its events go, its secrets, the tools it is offered, the
 * tokens it spent and the transcript it got to.
 */
interface Execution {
  entry: Active
  run: RunRow
  /** aborted on cancel, on shutdown and when the worker loses the run */
  signal: AbortSignal
  ref: RunRef
  /** the run's events, in order, several to a statement when they come faster than the database answers */
  writer: RunEventWriter
  /** the run's secret values never leave it; deltas are redacted as a stream */
  redact: Redactor
  deltas: StreamRedactor
  /** the secrets' values for the run's sandbox */
  env: Record<string, string> | undefined
  /** what the run may call; null: no tools (no gateway, or the run may use none) */
  offer: ToolOffer | null
  /** every model call's tokens, whatever the run's end (metering) */
  reported: Usage | null
  /** the tokens the engine's answer names */
  engineUsage: Usage | undefined
  /** the run's transcript once the engine answered (redacted) */
  transcript: TranscriptMessage[] | null
  /** the org's memory switches, read once for the run (its recall and its extraction) */
  memoryRead: Promise<MemorySettings> | null
}

/** The tools a run may call: what its settings name, and what the org allows when the run starts (or goes on). */
interface ToolOffer {
  gateway: ToolGatewayPort
  /** `tools` names the ones the run may use ([]: none) */
  allowed: Set<string> | null
  /** the org's MCP tools are listed when the run starts (or goes on), unless it may use none of them */
  offered: ToolDefinition[] | null
  /** the tools the org's policy denies, read when the run starts (or goes on): never offered */
  denied: Set<string>
  /**
   * `remember` is not offered while the org's memory is off (read when the run starts): a model told it can keep
   * facts would keep trying, and every call would be refused
   */
  memoryOn: boolean
}

/**
 * Claims queued runs from the database (`FOR UPDATE SKIP LOCKED`), runs them under a
 * renewed lease, and fails runs whose lease expired (`worker_lost`). Any number of
 * instances share the work; each run is claimed by exactly one.
 */
export class RunWorker {
  readonly instanceId = randomUUID()
  private readonly o: RunWorkerOptions
  private readonly active = new Map<string, Active>()
  private readonly recentlyCancelled = new Map<string, number>()
  private killed = false
  private loop: WorkerLoop<{ claimed: ClaimedRun; leaseUntil: number }> | null = null
  /**
   * the last claim saw runs waiting that it did not take (a thread's next turn, a full worker): a freed slot looks
   * again
   */
  private lookAgain = true
  private unsubscribe: Array<() => void> = []
  /** runs' ends that need nothing else in their transaction, several to a statement under load */
  private readonly finishes: FinishBatcher

  constructor(options: RunWorkerOptions) {
    this.o = options
    this.finishes = new FinishBatcher(options.db, this.instanceId)
  }

  /** Drops a run's waiting tool calls; never throws (the run ends either way). */
  private async dropToolCalls(orgId: string, runId: string): Promise<void> {
    if (!this.killed) await dropToolCalls(this.o.tools, this.o.log, orgId, runId)
  }

  get activeCount(): number {
    return this.active.size
  }

  start(): void {
    const { o } = this
    // src/worker-loop.ts: claims up to the concurrency, renews the leases, hands runs back at a drain
    this.loop = createWorkerLoop({
      name: 'run worker',
      log: o.log,
      concurrency: o.concurrency,
      pollMs: o.pollMs,
      listen: (wake) => [
        o.bus.subscribeAll((event) => {
          // a person's decision (on any instance) may let a waiting run go on
          if (event.type === 'run.queued' || event.type === 'approval.resolved') wake()
        })
      ],
      // the free slots are filled by one statement (runs-repo.ts claimRuns), fairly between orgs
      claimMany: async (room) => {
        const sentAt = Date.now()
        const { claimed, waiting } = await this.claim(room).catch((err: unknown) => {
          this.lookAgain = true
          throw err
        })
        this.lookAgain = waiting
        return claimed.map((run) => ({ claimed: run, leaseUntil: sentAt + o.leaseMs }))
      },
      // a claim says whether other runs wait: with none, the pass ends (a run's NOTIFY or the poll starts the next)
      claimMore: () => this.lookAgain,
      // a finished run frees a slot: worth a look when runs waited (for a slot, or for this run's end in its thread)
      claimAgain: () => this.lookAgain || this.active.size + 1 >= o.concurrency,
      work: ({ claimed, leaseUntil }, signal) => this.execute(claimed, leaseUntil, signal),
      lease: { everyMs: Math.max(50, Math.floor(o.leaseMs / 3)), renew: () => this.renewLeases() },
      drain: 'hand-back'
    })
    this.unsubscribe.push(
      o.bus.onControl((message) => {
        if (message.kind !== 'cancel') return
        const active = this.active.get(message.runId)
        if (active) active.controller.abort(new CancelRequested())
        else this.recentlyCancelled.set(message.runId, Date.now())
      })
    )
    this.loop.start()
  }

  /** Looks for queued runs now (NOTIFY of a new run, the poll, a finished run). */
  wake(): void {
    this.loop?.wake()
  }

  /** Takes up to `room` runs this worker may execute (runs-repo.ts claimRuns), and whether others wait. */
  private claim(room: number): Promise<{ claimed: ClaimedRun[]; waiting: boolean }> {
    return claimRuns(this.o.db, {
      instanceId: this.instanceId,
      leaseMs: this.o.leaseMs,
      budgetBytes: (this.o.contextTokens ?? 64_000) * BYTES_PER_TOKEN,
      limit: room
    })
  }

  private execute({ run, history }: ClaimedRun, leaseUntil: number, stopped: AbortSignal): Promise<void> {
    const controller = new AbortController()
    const entry: Active = { run, controller, done: Promise.resolve(), leaseUntil }
    this.active.set(run.id, entry)
    // the loop drains (the run is handed back) or was killed (nothing more is written)
    const stop = () =>
      controller.abort(
        stopped.reason instanceof LoopStopped && stopped.reason.killed
          ? new WorkerGone('killed')
          : new ShutdownRelease()
      )
    if (run.cancelRequested || this.recentlyCancelled.delete(run.id)) controller.abort(new CancelRequested())
    // claimed as the instance began to stop: handed back at once
    else if (stopped.aborted) stop()
    stopped.addEventListener('abort', stop, { once: true })
    // the run's span (its trace continues the request's that started it) and its metrics
    const observed = observeRun(run, this.instanceId)
    entry.done = observed
      .within(() => this.runOne(entry, history))
      .catch((err) => {
        if (!this.killed)
          this.o.log.error({ err, runId: run.id, orgId: run.orgId }, 'run worker: finishing a run failed')
      })
      // however the run left (a lost lease, a crash of its end), its workspace is not kept from other instances
      .then(() => this.settleWorkspace(run).then(() => {}))
      .finally(() => {
        this.active.delete(run.id)
        observed.end(entry.ended)
      })
    return entry.done
  }

  private guard(): void {
    if (this.killed) throw new WorkerGone('this worker was killed')
  }

  /**
   * A write (or read) of a run this worker holds, tried again while the database is away
   * (an outage shorter than the lease fails no run), with backoff, until it
   * is back or the lease can no longer be counted on (LeaseLost: the sweeper answers for
   * the run). With `signal`, a cancel or shutdown stops the waiting too.
   */
  private async whileLeased<T>(entry: Active, work: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await work()
      } catch (err) {
        if (!isDatabaseUnavailable(err) || this.killed) throw err
        const wait = backoffDelay(attempt, WRITE_RETRY_BASE_MS, WRITE_RETRY_MAX_MS)
        if (Date.now() + wait >= entry.leaseUntil)
          throw new LeaseLost(`the database stayed away past the lease of run ${entry.run.id}`, { cause: err })
        if (attempt === 1)
          this.o.log.warn(
            { err, runId: entry.run.id, orgId: entry.run.orgId },
            "run worker: the database is away; retrying the run's write"
          )
        await sleep(wait, undefined, signal ? { signal } : undefined).catch(() => {})
        this.guard()
        if (signal?.aborted) throw signal.reason
      }
    }
  }

  /**
   * A run's last write of this execution (its end, its suspension, its hand-back), tried
   * like any other while the database is away; `lost` when the lease ran out meanwhile or
   * the worker was killed: the sweeper (or the next claim) answers for the run then.
   */
  private async lastWrite<T>(entry: Active, work: () => Promise<T>, lost: T): Promise<T> {
    try {
      return await this.whileLeased(entry, work)
    } catch (err) {
      if (err instanceof LeaseLost || err instanceof WorkerGone || err instanceof FinishAbandoned) return lost
      throw err
    }
  }

  /** What chat platforms add to a run's context; nothing when one fails (the run goes on without it). */
  private async threadContextOf(run: RunRow, signal: AbortSignal): Promise<WireMessage[]> {
    const found: WireMessage[] = []
    for (const source of this.o.threadContext ?? []) {
      try {
        found.push(...(await source.messagesFor(run, signal)))
      } catch (err) {
        this.o.log.warn({ err, runId: run.id, orgId: run.orgId }, "a chat thread's other messages could not be read")
      }
    }
    return found
  }

  /**
   * One execution of a run: what the engine is given, its answer (or why it stopped), the run's end. A run that waits
   * for people's decisions, goes back to the queue or is no longer this worker's ends here without one.
   */
  private async runOne(entry: Active, history: WireMessage[]): Promise<void> {
    const x = this.begin(entry)
    let outcome: RunOutcome
    try {
      const { engine, job, ctx } = await this.prepare(x, history)
      const result = job ? await job.run(ctx, engine) : await engine.run(ctx)
      outcome = await this.answered(x, result, { engine, job, history })
    } catch (err) {
      const stopped = await this.stopped(x, err)
      if (stopped === null) return
      outcome = stopped
    }
    if (this.killed) return
    // a run that ended before its answer keeps what it got to (at least its prompt)
    const transcript =
      x.transcript ?? entry.transcript?.messages ?? toTranscript([{ role: 'user', content: x.run.prompt }], x.redact)
    await this.finish(entry, x.ref, outcome, x.reported ?? x.engineUsage ?? null, x.writer, transcript)
  }

  /** What the execution's steps share, before anything is read: no secrets yet, the tokens it spent before. */
  private begin(entry: Active): Execution {
    const { run } = entry
    const { signal } = entry.controller
    const gateway = this.o.tools
    // `tools` names the ones the run may use ([]: none)
    const allowed = run.settings.tools ? new Set(run.settings.tools) : null
    return {
      entry,
      run,
      signal,
      ref: { id: run.id, rootRunId: run.rootRunId, orgId: run.orgId, realUserId: realUserIdOfRun(run) },
      // the run's events, in order, several to a statement when they come faster than the database answers
      writer: new RunEventWriter(async (events) => {
        await this.whileLeased(entry, () => this.o.events.appendAll(events), signal)
      }),
      redact: NO_SECRETS,
      deltas: NO_SECRETS.stream(),
      env: undefined,
      offer:
        gateway && allowed?.size !== 0 ? { gateway, allowed, offered: null, denied: new Set(), memoryOn: true } : null,
      // a run going on after it waited counts the tokens it spent before
      reported:
        run.suspended && (run.inputTokens !== null || run.outputTokens !== null)
          ? { promptTokens: run.inputTokens ?? 0, completionTokens: run.outputTokens ?? 0 }
          : null,
      engineUsage: undefined,
      transcript: null,
      memoryRead: null
    }
  }

  /**
   * What the engine is given, read before it starts: the run's secrets, its engine (or a group's job), the tools the
   * org lets it use, what chat platforms add to its context, its attachments in its workspace.
   */
  private async prepare(
    x: Execution,
    history: WireMessage[]
  ): Promise<{ engine: Engine; job: RunJob | null; ctx: EngineContext }> {
    const { run, signal } = x
    if (run.secretNames.length > 0) {
      const secrets = await this.secretsOf(run)
      x.redact = secrets.redact
      x.env = secrets.env
      x.deltas = x.redact.stream()
      redactSpansWith(x.redact)
    }
    // an org provider's model is looked up only for openai runs the deployment cannot serve
    const engine = await this.o.engines.forRun(run)
    if (!engine) throw new EngineError(`engine ${run.engine} is not available on this instance`)
    const job = await this.jobOf(run)
    if (engine.callsTools !== false) await this.readToolPolicy(x)
    const platformMessages = await this.threadContextOf(run, signal)
    const attachments = await this.attachmentsOf(run, signal)
    this.guard()
    // after the thread's earlier turns: what colleagues wrote since, just before this prompt
    const given = platformMessages.length > 0 ? [...history, ...platformMessages] : history
    return { engine, job, ctx: this.engineContext(x, given, attachments) }
  }

  /** The org's tool policy and MCP tools, and whether its memory is on, as far as the run's tools need them. */
  private async readToolPolicy(x: Execution): Promise<void> {
    const { offer, run } = x
    if (!offer) return
    offer.denied = await offer.gateway.deniedTools(run.orgId)
    if (!offer.allowed || [...offer.allowed].some((name) => name.startsWith('mcp__')))
      offer.offered = await offer.gateway.definitionsFor(run.orgId)
    if (!offer.allowed || offer.allowed.has(REMEMBER_TOOL)) offer.memoryOn = (await this.memorySettings(x)).enabled
  }

  /** The run's attachments put in its workspace, and what its prompt says of them; null without. */
  private async attachmentsOf(run: RunRow, signal: AbortSignal): Promise<EngineContext['attachments']> {
    const gatewayFiles = this.o.tools
    // a run going on after it waited has its attachments in its workspace already
    if (run.attachments.length === 0 || run.suspended) return null
    return prepareAttachments(
      this.o.artifacts,
      run,
      gatewayFiles
        ? (files) => gatewayFiles.putFiles({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId }, files, signal)
        : null
    )
  }

  /** What the engine sees of the run, and what it may do: emit, call tools, save, propose, recall. */
  private engineContext(
    x: Execution,
    history: WireMessage[],
    attachments: EngineContext['attachments']
  ): EngineContext {
    const { o } = this
    const { run } = x
    return {
      runId: run.id,
      prompt: run.prompt,
      model: run.model,
      instructions: run.instructions,
      history,
      attachments,
      resume: run.suspended,
      checkpoint: (state) => this.checkpoint(x, state),
      settings: run.settings,
      reportUsage: (u) => this.reportUsage(x, u),
      signal: x.signal,
      emit: (type, data) => this.emit(x, type, data),
      tools: this.runTools(x),
      saveArtifact: async (name, content, contentType) => {
        this.guard()
        const saved = await o.artifacts.save(
          { orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId },
          { name: x.redact.text(name), content: x.redact.text(content), contentType }
        )
        await this.emit(x, 'artifact.created', { ...saved })
        return saved
      },
      proposeKnowledge: async (draft) => {
        this.guard()
        return o.knowledge.propose({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId }, x.redact.deep(draft))
      },
      proposeSkill: async (proposal) => {
        this.guard()
        return o.skills.propose({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId }, x.redact.deep(proposal))
      },
      recall: (raw) => this.recall(x, raw)
    }
  }

  /** Stores one event of the run through its writer; nothing once the run is stopped. */
  private async store(x: Execution, type: string, data: Record<string, unknown>): Promise<void> {
    this.guard()
    if (x.signal.aborted) throw x.signal.reason
    await x.writer.emit({ orgId: x.run.orgId, runId: x.run.id, rootRunId: x.run.rootRunId, type, data })
  }

  /** The streamed text held back (it might have begun a secret's value), stored as a last delta. */
  private async flushDeltas(x: Execution): Promise<void> {
    const rest = x.deltas.flush()
    if (rest !== '') await this.store(x, 'message.delta', { text: rest })
  }

  /** An event the engine emits, with the run's secret values redacted (deltas as a stream). */
  private async emit(x: Execution, type: string, data: Record<string, unknown>): Promise<void> {
    if (x.redact.empty) return this.store(x, type, data)
    if (type === 'message.delta' && typeof data.text === 'string') {
      const text = x.deltas.push(data.text)
      if (text !== '') await this.store(x, type, { ...data, text })
      return
    }
    await this.flushDeltas(x)
    await this.store(x, type, x.redact.deep(data))
  }

  /** Every model call's tokens, whatever the run's end (metering). */
  private reportUsage(x: Execution, u: Usage): void {
    x.reported = {
      promptTokens: (x.reported?.promptTokens ?? 0) + u.promptTokens,
      completionTokens: (x.reported?.completionTokens ?? 0) + u.completionTokens
    }
  }

  /** The org's memory switches, read once for the run (its recall and its extraction). */
  private memorySettings(x: Execution): Promise<MemorySettings> {
    return (x.memoryRead ??= this.whileLeased(x.entry, () => this.o.memory.settingsFor(x.run.orgId), x.signal).catch(
      (err: unknown) => {
        x.memoryRead = null
        throw err
      }
    ))
  }

  /** The tools the engine is offered (none without an offer), each call checked again against what the run may use. */
  private runTools(x: Execution): RunTools | undefined {
    const { offer, run } = x
    if (!offer) return undefined
    const { gateway, allowed } = offer
    return {
      definitions: () =>
        (offer.offered ?? gateway.definitions()).filter(
          (d) =>
            (!allowed || allowed.has(d.function.name)) &&
            !offer.denied.has(d.function.name) &&
            (offer.memoryOn || d.function.name !== REMEMBER_TOOL)
        ),
      execute: async (call) => {
        this.guard()
        await this.flushDeltas(x)
        // the gateway stores the call's events itself: what the run said before comes first
        await x.writer.flush()
        if ((allowed && !allowed.has(call.name)) || offer.denied.has(call.name))
          return { content: `error: the tool ${JSON.stringify(call.name)} is not available to this run` }
        // a call that needs a person's decision does not hold this worker
        const result = await gateway.execute({
          orgId: run.orgId,
          runId: run.id,
          rootRunId: run.rootRunId,
          ...call,
          env: x.env,
          redact: x.redact
        })
        if (result.status === 'pending') return { pending: result.approvalId! }
        if (result.status === 'deferred') return { deferred: true as const }
        return { content: result.content }
      }
    }
  }

  /** Where the run could go on from if handed back; a whole tool round's transcript is stored then. */
  private checkpoint(x: Execution, state: SuspendedRun): void | Promise<void> {
    const { entry, run } = x
    entry.checkpoint = { state: JSON.stringify(state), usage: x.reported }
    const messages = toTranscript(ownMessages(state.messages as WireMessage[]), x.redact)
    const written = entry.transcript?.written ?? 0
    entry.transcript = { messages, written }
    // a whole tool round is stored before the model is asked again: a run handed back or
    // lost keeps what it did, and the thread's next runs read it from there
    if (state.calls.length > 0) return
    this.guard()
    return this.whileLeased(entry, () => appendTranscript(this.o.db, run, messages, written), x.signal).then(() => {
      entry.transcript = { messages, written: Math.max(written, messages.length) }
    })
  }

  /** Recalls from the run's memory pools for the engine; emits `memory.recalled`. */
  private async recall(x: Execution, raw: string): Promise<RecalledItem[]> {
    this.guard()
    // the run's first read of its org's memory settings is the recall's own statement
    const known = x.memoryRead ? (await this.memorySettings(x)).enabled : undefined
    const recalled = await this.whileLeased(
      x.entry,
      () => this.o.memory.recall(x.ref, x.redact.text(raw), { kind: 'prompt', enabled: known }),
      x.signal
    )
    if (recalled.settings) x.memoryRead ??= Promise.resolve(recalled.settings)
    await this.emit(x, 'memory.recalled', {
      query: recalled.query,
      itemIds: recalled.items.map((i) => i.id),
      count: recalled.items.length
    })
    return recalled.items
  }

  /**
   * The engine answered: what it emitted goes with the run's end, its transcript is kept, the answer is checked
   * against the run's response format, and a succeeded run's facts are joined by those the extraction finds.
   */
  private async answered(
    x: Execution,
    result: EngineResult,
    { engine, job, history }: { engine: Engine; job: RunJob | null; history: WireMessage[] }
  ): Promise<RunOutcome> {
    const { run, writer, redact } = x
    await this.flushDeltas(x)
    // what the engine emitted and is not stored yet goes with the run's end
    writer.hold()
    await writer.settled()
    x.engineUsage = result.usage
    const output = redact.text(result.text)
    // an engine that keeps no conversation of its own (echo, a job): the prompt and the answer
    x.transcript = toTranscript(
      result.transcript ?? [
        { role: 'user', content: run.prompt },
        { role: 'assistant', content: result.text }
      ],
      redact
    )
    const invalid = await this.o.outputCheck.check(run.settings, output)
    const outcome: RunOutcome =
      invalid === null
        ? { status: 'succeeded', facts: result.facts.map((f) => redact.text(f)), output }
        : { status: 'failed', error: invalid }
    if (outcome.status === 'succeeded' && !job && (await this.memorySettings(x)).extract) {
      // the answer is shown before the extraction's model call, not after it
      await writer.flush()
      outcome.facts.push(
        ...(await this.extractFacts(engine, run, output, {
          signal: x.signal,
          emit: (type, data) => this.emit(x, type, data),
          reportUsage: (u) => this.reportUsage(x, u),
          redact,
          // a run that went on from its stored conversation was given no history at its claim:
          // the turns it was first sent are in that conversation
          history: run.suspended ? earlierMessages(run.suspended.messages as WireMessage[]) : history
        }))
      )
    }
    return outcome
  }

  /**
   * The run stopped before its end: cancelled or failed (its end, returned), or null when this execution ends without
   * one: the run waits for people's decisions, goes back to the queue, or is no longer this worker's to end.
   */
  private async stopped(x: Execution, err: unknown): Promise<RunOutcome | null> {
    const { entry, run, signal, redact } = x
    if (this.killed || err instanceof WorkerGone || err instanceof LeaseLost) return null
    const reason = signal.aborted ? signal.reason : err
    if (reason instanceof RunSuspended) {
      await this.flushDeltas(x)
      await x.writer.flush()
      await this.suspend(
        entry,
        reason.state,
        x.reported,
        toTranscript(ownMessages(reason.state.messages as WireMessage[]), redact)
      )
      return null
    }
    if (reason instanceof CancelRequested) return { status: 'cancelled' }
    if (reason instanceof ShutdownRelease || isDatabaseUnavailable(reason)) {
      // not the engine's fault: the instance is stopping, or the database went away under
      // something the run read or wrote; another worker (or this one) runs it again
      if (!(reason instanceof ShutdownRelease))
        this.o.log.warn(
          { err: reason, runId: run.id, orgId: run.orgId },
          'run worker: the database went away under the run; handing it back'
        )
      // what the run said before it stopped is kept when the database lets us
      else await x.writer.flush().catch(() => {})
      await this.release(entry)
      return null
    }
    if (err instanceof EngineError) return { status: 'failed', error: redact.text(err.message) }
    this.o.log.error(
      { err: redact.empty ? err : redactedError(redact, err), runId: run.id, orgId: run.orgId },
      'engine crashed'
    )
    return { status: 'failed', error: 'engine_error' }
  }

  /**
   * The run's end, in one transaction retried like the events (a failed try rolled back
   * whole; a try that did commit, its answer lost, makes the next one find the run
   * finished): its status and event (with the events still waiting to be written, in one
   * statement), its facts to capture, and what follows it (playbook steps, tasks),
   * announced once committed.
   */
  private async finish(
    entry: Active,
    ref: RunRef,
    outcome: RunOutcome,
    usage: Usage | null,
    writer: RunEventWriter,
    transcript: TranscriptMessage[]
  ): Promise<void> {
    const { o } = this
    const { run } = entry
    // saved before the run's end is stored: the thread's next run, on any instance, sees these files
    const unsaved = await this.settleWorkspace(run)
    if (unsaved !== null && outcome.status === 'succeeded') outcome = { status: 'failed', error: unsaved }
    entry.ended = outcome.status
    // a cancelled or failed run leaves no call waiting for a person
    if (outcome.status !== 'succeeded') await this.dropToolCalls(run.orgId, run.id)
    const waiting = await writer.take()
    const { event, ended } = endOf(run, outcome, usage)
    const events = [...waiting, event]
    // nothing else to commit with the end (no facts, no follow-up): one statement, no transaction, shared with
    // the ends of this instance's other runs that come while one is in flight
    const alone =
      (outcome.status !== 'succeeded' || outcome.facts.length === 0) &&
      !o.followUps.some((f) => f.concerns?.(ended) ?? true)
    const transcriptFrom = entry.transcript?.written ?? 0
    if (
      alone &&
      (await this.lastWrite(
        entry,
        () =>
          this.finishes.finish({
            run,
            outcome,
            usage,
            transcript: { messages: transcript, from: transcriptFrom },
            events
          }),
        true
      ))
    )
      return
    // the lease was lost, or the run kept facts to capture: the transaction below tells which
    const next = await this.lastWrite(
      entry,
      () =>
        o.db.transaction(async (tx) => {
          // the lease was lost meanwhile (a sweeper failed it): the sweeper's answer stands
          const finished = await markFinished(tx, run.id, this.instanceId, outcome, usage)
          if (!finished) return []
          await appendTranscript(tx, run, transcript, transcriptFrom)
          // its size as the thread's next runs are sent it, measured once here rather than at each of their claims
          if (outcome.status === 'succeeded') await storeContextSizes(tx, run.id)
          await insertEvents(tx, events)
          // what the model remembered is kept whatever the end; the engine's and the extraction's facts
          // on success
          const facts = [...finished.remembered, ...(outcome.status === 'succeeded' ? outcome.facts : [])]
          if (facts.length > 0) await o.memory.enqueueCapture(tx, ref, facts)
          const started: RunRow[] = []
          for (const followUps of o.followUps) {
            for (const followUp of await followUps.afterFinish(tx, ended))
              started.push(await insertFollowUp(tx, followUp))
          }
          return started
        }),
      []
    )
    // committed: a run.queued a killed instance cannot store is stored by the sweeper
    if (this.killed) return
    await announceCommitted(o.events, next, o.log)
  }

  /**
   * The run's model is asked once for the durable facts of the exchange. A
   * failure (the call, or an answer that is not `{"facts": [...]}`) is a
   * `memory.extract_failed` event and never fails the run; a cancel still cancels it.
   */
  private async extractFacts(
    engine: Engine,
    run: RunRow,
    output: string,
    ctx: {
      signal: AbortSignal
      emit: EngineContext['emit']
      reportUsage: EngineContext['reportUsage']
      redact: Redactor
      /** the thread's earlier turns the run was given: what the exchange may refer to */
      history: WireMessage[]
    }
  ): Promise<string[]> {
    let answer: string
    try {
      const done = await engine.complete(
        extractionMessages(run.prompt, output, ctx.history),
        run.model,
        { responseFormat: { type: 'json_object' } },
        ctx.signal
      )
      ctx.reportUsage(done.usage)
      answer = done.text
    } catch (err) {
      if (ctx.signal.aborted) throw ctx.signal.reason
      if (err instanceof WorkerGone || err instanceof LeaseLost) throw err
      await ctx.emit('memory.extract_failed', {
        error: ctx.redact.text(err instanceof EngineError ? err.message : 'the extraction call failed')
      })
      return []
    }
    const parsed = parseExtraction(answer)
    if ('error' in parsed) {
      await ctx.emit('memory.extract_failed', { error: parsed.error })
      return []
    }
    return parsed.facts.map((f) => ctx.redact.text(f))
  }

  /** The run leaves this worker to wait for people's decisions (runs-repo.ts suspendRun). */
  private async suspend(
    entry: Active,
    state: SuspendedRun,
    spent: Usage | null,
    transcript: TranscriptMessage[]
  ): Promise<void> {
    const { run } = entry
    entry.ended = 'requires_action'
    // the run may go on on another instance
    await this.settleWorkspace(run)
    await this.lastWrite(entry, () => suspendRun(this.o.db, run, this.instanceId, state, spent, transcript), undefined)
  }

  /** The job a group does for this run (a wiki build), or null: the engine answers the prompt. */
  private async jobOf(run: RunRow): Promise<RunJob | null> {
    for (const jobs of this.o.jobs ?? []) {
      const job = await jobs.jobOf({
        id: run.id,
        orgId: run.orgId,
        rootRunId: run.rootRunId,
        realUserId: realUserIdOfRun(run),
        model: run.model,
        metadata: run.metadata
      })
      if (job) return job
    }
    return null
  }

  /**
   * The run's secrets: their values for its sandbox, and the redactor of all it stores.
   * A secret deleted (or unopenable) since the run was accepted fails the run.
   */
  private async secretsOf(run: RunRow): Promise<{ redact: Redactor; env: Record<string, string> }> {
    let opened
    try {
      opened = await this.o.secrets.open(run.orgId, run.secretNames)
    } catch (err) {
      throw new EngineError(
        err instanceof Error && 'statusCode' in err ? err.message : "the run's secrets could not be read"
      )
    }
    if (opened.missing.length > 0)
      throw new EngineError(`the run names secrets this organization no longer has: ${opened.missing.join(', ')}`)
    return { redact: new Redactor(opened.values), env: Object.fromEntries(opened.values.map((s) => [s.name, s.value])) }
  }

  /**
   * Ends the run's hold on its workspace (none when killed: a crash saves nothing); the error it ends with, or null.
   */
  private async settleWorkspace(run: RunRow): Promise<string | null> {
    if (this.killed || !this.o.tools) return null
    return this.o.tools.settleWorkspace(run.orgId, run.id)
  }

  /** Hands a run back to the queue (shutdown, the database away): runs-repo.ts releaseRun. */
  private async release(entry: Active): Promise<void> {
    const { run, checkpoint } = entry
    entry.ended = 'queued'
    await this.settleWorkspace(run)
    await this.lastWrite(
      entry,
      () => releaseRun(this.o.db, run, this.instanceId, checkpoint, entry.transcript?.messages),
      undefined
    )
  }

  private async renewLeases(): Promise<void> {
    if (this.killed || this.active.size === 0) return
    const ids = [...this.active.keys()]
    const sentAt = Date.now()
    try {
      const rows = await renewLeases(this.o.db, this.instanceId, this.o.leaseMs, ids)
      const kept = new Set(rows.map((r) => r.id))
      for (const id of kept) {
        const entry = this.active.get(id)
        if (entry) entry.leaseUntil = sentAt + this.o.leaseMs
      }
      for (const row of rows) if (row.cancel_requested) this.active.get(row.id)?.controller.abort(new CancelRequested())
      // a run we hold but could not renew was taken from us (swept): stop working on it
      for (const id of ids) if (!kept.has(id)) this.active.get(id)?.controller.abort(new CancelRequested())
    } catch (err) {
      if (!this.killed) this.o.log.warn({ err }, 'run worker: lease renewal failed')
    }
    const cutoff = Date.now() - 60_000
    for (const [id, at] of this.recentlyCancelled) if (at < cutoff) this.recentlyCancelled.delete(id)
  }

  private stopTimers(): void {
    for (const fn of this.unsubscribe) fn()
    this.unsubscribe = []
  }

  /**
   * Graceful stop: claim nothing more and hand every running run back to the queue at
   * once (re-queued, its lease released), for another instance or the next start. A run
   * already writing its end finishes. Waits at most `deadlineMs` for the hand-backs
   * (the database may be away); a run not handed back by then is left to its lease.
   */
  async close(deadlineMs: number): Promise<void> {
    if (this.killed) return
    const { items, left } = (await this.loop?.stop(deadlineMs)) ?? { items: [], left: [] }
    // runs not handed back by the deadline: the loop says so; their leases will expire
    if (left.length === 0 && items.length > 0)
      this.o.log.info(
        { runs: items.map((r) => r.claimed.run.id) },
        `run worker: ${items.length} running runs handed back to the queue`
      )
    this.stopTimers()
  }

  /** Simulates a crash: everything stops at once, nothing more is written; leases expire. */
  kill(): void {
    this.killed = true
    this.finishes.kill()
    this.loop?.kill()
    this.stopTimers()
    for (const a of this.active.values()) a.controller.abort(new WorkerGone('killed'))
  }
}

type Usage = NonNullable<EngineResult['usage']>

/** The instance stops: the run goes back to the queue (a tool call running then is interrupted, not cancelled). */
class ShutdownRelease extends RunHandedBack {
  override name = 'ShutdownRelease'
}

/**
 * The run's end: its event (`run.<status>`, with the error it failed with, or the tokens a succeeded run spent) and
 * the run as what follows its end sees it.
 */
function endOf(run: RunRow, outcome: RunOutcome, usage: Usage | null): { event: NewEvent; ended: FinishedRun } {
  const data: Record<string, unknown> =
    outcome.status === 'failed' ? { error: outcome.error } : outcome.status === 'succeeded' ? { usage } : {}
  return {
    event: { orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, type: `run.${outcome.status}`, data },
    ended: {
      id: run.id,
      orgId: run.orgId,
      rootRunId: run.rootRunId,
      userId: run.userId,
      status: outcome.status,
      metadata: run.metadata
    }
  }
}

/** An error fit for the log: its message and stack with the run's secret values redacted. */
function redactedError(redact: Redactor, err: unknown): { type: string; message: string; stack?: string | undefined } {
  const e = err instanceof Error ? err : new Error(String(err))
  return {
    type: e.name,
    message: redact.text(e.message),
    stack: e.stack === undefined ? undefined : redact.text(e.stack)
  }
}
