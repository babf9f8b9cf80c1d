import { randomUUID } from 'node:crypto'
import { and, eq, sql } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { EventBus } from '../../plugins/event-bus.js'
import { rowsOf, type Db } from '../db/client.js'
import { realUserIdOfRun } from './run-ref.js'
import type { EngineRegistry } from './engines/registry.js'
import { EngineError, type ChatMessage, type EngineContext, type EngineResult, type RunTools, type ToolDefinition } from './engines/types.js'
import { outputViolation } from './agent-options.js'
import { prepareAttachments } from './attachments.js'
import { appendEvent, notifyStored, type EventBatcher } from './events.js'
import type { RunArtifacts } from './artifact-port.js'
import type { RunKnowledge } from './knowledge-port.js'
import type { RunMemory, RunRef } from './memory-port.js'
import { runs } from './tables.js'
import { announceCommitted, insertFollowUp, type RunRow } from './runs-repo.js'
import type { FinishedRun, RunFollowUps, RunSkills } from './skills-port.js'
import type { RunSecrets } from './secrets-port.js'
import type { RunJob, RunJobs } from './job-port.js'
import { NO_SECRETS, Redactor } from '../secrets/redact.js'
import { boolOf, dateOf, dateOrNull, jsonOf } from '../db/rows.js'

/** The agent runtime's tool gateway as the worker needs it (src/runtime/gateway.ts). */
export interface ToolGatewayPort {
  definitions(): ToolDefinition[]
  execute(input: {
    orgId: string; runId: string; rootRunId: string; callId: string; name: string; arguments: string; signal: AbortSignal
    /** the run's secrets, as the environment of its sandbox commands */
    env?: Record<string, string> | undefined
    /** what the gateway stores, streams and answers goes through it (the run's secret values redacted) */
    redact?: Redactor | undefined
  }): Promise<{ content: string }>
  /** drops the run's waiting approvals (every instance sees it) and stops its running calls here */
  cancelRun(orgId: string, runId: string): Promise<number>
  /** writes files into the thread's workspace inside its confinement; false without a sandbox */
  putFiles(ref: { orgId: string; rootRunId: string }, files: Array<{ path: string; data: Buffer }>): Promise<boolean>
}

/** Drops a run's waiting tool calls, if runs have tools; never throws (the run ends either way). */
export async function dropToolCalls(tools: ToolGatewayPort | null, log: FastifyBaseLogger, orgId: string, runId: string): Promise<void> {
  if (!tools) return
  try {
    await tools.cancelRun(orgId, runId)
  } catch (err) {
    log.warn({ err, runId }, 'dropping waiting tool calls failed')
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
  /** MODEL_CONTEXT_TOKENS: the thread's earlier turns sent with a run fit in this, with its instructions and prompt */
  contextTokens?: number | undefined
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

interface Active {
  run: RunRow
  controller: AbortController
  done: Promise<void>
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
  private stopping = false
  private killed = false
  private claiming = false
  private wakeAgain = false
  private timers: NodeJS.Timeout[] = []
  private unsubscribe: Array<() => void> = []

  constructor(options: RunWorkerOptions) {
    this.o = options
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
    if (o.concurrency > 0) {
      this.unsubscribe.push(o.bus.subscribeAll((event) => {
        if (event.type === 'run.queued') this.wake()
      }))
      this.timers.push(setInterval(() => this.wake(), o.pollMs))
      this.timers.push(setInterval(() => void this.renewLeases(), Math.max(50, Math.floor(o.leaseMs / 3))))
    }
    this.unsubscribe.push(o.bus.onControl((message) => {
      if (message.kind !== 'cancel') return
      const active = this.active.get(message.runId)
      if (active) active.controller.abort(new CancelRequested())
      else this.recentlyCancelled.set(message.runId, Date.now())
    }))
    for (const t of this.timers) t.unref()
    this.wake()
  }

  /** Looks for queued runs now (NOTIFY of a new run, the poll timer, a finished run). */
  wake(): void {
    if (this.stopping || this.o.concurrency === 0) return
    if (this.claiming) {
      this.wakeAgain = true
      return
    }
    this.claiming = true
    void this.claimLoop().finally(() => {
      this.claiming = false
      if (this.wakeAgain) {
        this.wakeAgain = false
        this.wake()
      }
    })
  }

  private async claimLoop(): Promise<void> {
    while (!this.stopping && this.active.size < this.o.concurrency) {
      let claimed: Claimed | null
      try {
        claimed = await this.claim()
      } catch (err) {
        if (!this.stopping) this.o.log.error({ err }, 'run worker: claim failed')
        return
      }
      if (!claimed) return
      this.execute(claimed)
    }
  }

  /**
   * One statement (one round trip): take the oldest queued run nobody else is taking and
   * whose thread has no earlier run still queued or running (contract 13.2: runs of one
   * thread run one at a time, in order), lease it, read the thread's earlier succeeded
   * turns that fit in MODEL_CONTEXT_TOKENS (newest kept, oldest dropped whole), and store
   * and announce its `run.started` event with `contextTurns` and `droppedTurns`.
   */
  private async claim(): Promise<Claimed | null> {
    const budgetBytes = (this.o.contextTokens ?? 64_000) * BYTES_PER_TOKEN
    const result = await this.o.db.execute(sql`
      with claimed as (
        update runs set status = 'running', started_at = now(), lease_owner = ${this.instanceId},
          lease_expires_at = now() + make_interval(secs => ${this.o.leaseMs / 1000})
        -- only a run whose run.queued is stored: it is written just after the run commits,
        -- and a run.started must never come before it
        where id = (select id from runs where status = 'queued'
                      and exists (select 1 from run_events e where e.run_id = runs.id and e.type = 'run.queued')
                      and not exists (select 1 from runs b where b.org_id = runs.org_id and b.root_run_id = runs.root_run_id
                                        and b.id < runs.id and b.status in ('queued', 'running'))
                    order by created_at, id limit 1 for update skip locked)
        returning *
      ),
      hist as (
        select h.id, h.prompt, h.output,
               sum(octet_length(h.prompt) + octet_length(h.output)) over (order by h.id desc) as cum
        from runs h join claimed c on h.org_id = c.org_id and h.root_run_id = c.root_run_id and h.id < c.id
        where h.status = 'succeeded' and h.output is not null
      ),
      ctx as (
        select coalesce(jsonb_agg(jsonb_build_object('prompt', hist.prompt, 'output', hist.output) order by hist.id)
                          filter (where hist.cum <= b.budget), '[]'::jsonb) as turns,
               (count(*) filter (where hist.cum <= b.budget))::int as kept,
               count(hist.id)::int as total
        from (select ${budgetBytes} - octet_length(c.prompt) - coalesce(octet_length(c.instructions), 0) as budget from claimed c) b
        left join hist on true
      ),
      async as (select set_config('synchronous_commit', 'off', true) as v from claimed),
      lock as (select pg_advisory_xact_lock(hashtext('cairn.run_events:' || claimed.org_id))::text as v from claimed, async),
      ev as (
        insert into run_events (org_id, run_id, root_run_id, type, data)
        select org_id, id, root_run_id, 'run.started',
               jsonb_build_object('engine', engine, 'model', model, 'contextTurns', ctx.kept, 'droppedTurns', ctx.total - ctx.kept)
        from claimed, ctx, lock
        returning id, org_id, run_id, root_run_id, type, data, created_at
      )
      select claimed.*, ctx.turns as context_turns, ${notifyStored(sql`ev`)}::text as notified
      from claimed, ev, ctx`)
    const row = rowsOf<Record<string, unknown>>(result)[0]
    if (!row) return null
    const turns = jsonOf<Array<{ prompt: string; output: string }> | null>(row.context_turns) ?? []
    return { run: runFromRow(row), history: turns.flatMap((t) => [{ role: 'user' as const, content: t.prompt }, { role: 'assistant' as const, content: t.output }]) }
  }

  private execute({ run, history }: Claimed): void {
    const controller = new AbortController()
    const entry: Active = { run, controller, done: Promise.resolve() }
    this.active.set(run.id, entry)
    if (run.cancelRequested || this.recentlyCancelled.delete(run.id)) controller.abort(new CancelRequested())
    entry.done = this.runOne(run, history, controller.signal)
      .catch((err) => {
        if (!this.killed) this.o.log.error({ err, runId: run.id }, 'run worker: finishing a run failed')
      })
      .finally(() => {
        this.active.delete(run.id)
        this.wake()
      })
  }

  private guard(): void {
    if (this.killed) throw new WorkerGone('this worker was killed')
  }

  private async runOne(run: RunRow, history: ChatMessage[], signal: AbortSignal): Promise<void> {
    const { o } = this
    const ref: RunRef = { id: run.id, rootRunId: run.rootRunId, orgId: run.orgId, realUserId: realUserIdOfRun(run) }
    const store = async (type: string, data: Record<string, unknown>) => {
      this.guard()
      if (signal.aborted) throw signal.reason
      await o.events.append({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, type, data })
    }
    // contract 10: the run's secret values never leave it; deltas are redacted as a stream
    let redact = NO_SECRETS
    let deltas = redact.stream()
    let env: Record<string, string> | undefined
    const flushDeltas = async () => {
      const rest = deltas.flush()
      if (rest !== '') await store('message.delta', { text: rest })
    }
    const emit = async (type: string, data: Record<string, unknown>) => {
      if (redact.empty) return store(type, data)
      if (type === 'message.delta' && typeof data.text === 'string') {
        const text = deltas.push(data.text)
        if (text !== '') await store(type, { ...data, text })
        return
      }
      await flushDeltas()
      await store(type, redact.deep(data))
    }
    const gateway = this.o.tools
    // contract 13.3: `tools` names the ones the run may use ([]: none)
    const allowed = run.settings.tools ? new Set(run.settings.tools) : null
    const tools: RunTools | undefined = gateway && allowed?.size !== 0 ? {
      definitions: () => gateway.definitions().filter((d) => !allowed || allowed.has(d.function.name)),
      execute: async (call) => {
        this.guard()
        await flushDeltas()
        if (allowed && !allowed.has(call.name)) return { content: `error: the tool ${JSON.stringify(call.name)} is not available to this run` }
        return gateway.execute({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, ...call, env, redact })
      }
    } : undefined
    // every model call's tokens, whatever the run's end (contract 13.3, metering)
    let reported: Usage | null = null
    const reportUsage = (u: Usage) => {
      reported = { promptTokens: (reported?.promptTokens ?? 0) + u.promptTokens, completionTokens: (reported?.completionTokens ?? 0) + u.completionTokens }
    }
    let outcome: { status: 'succeeded'; facts: string[]; output: string } | { status: 'failed'; error: string } | { status: 'cancelled' }
    let engineUsage: Usage | undefined
    try {
      if (run.secretNames.length > 0) {
        ;({ redact, env } = await this.secretsOf(run))
        deltas = redact.stream()
      }
      // an org provider's model is looked up only for openai runs the deployment cannot serve
      const engine = await o.engines.forRun(run)
      if (!engine) throw new EngineError(`engine ${run.engine} is not available on this instance`)
      const job = await this.jobOf(run)
      const gatewayFiles = gateway
      const attachments = run.attachments.length === 0 ? null : await prepareAttachments(o.artifacts, run,
        gatewayFiles ? (files) => gatewayFiles.putFiles({ orgId: run.orgId, rootRunId: run.rootRunId }, files) : null)
      this.guard()
      const ctx: EngineContext = {
        runId: run.id,
        prompt: run.prompt,
        model: run.model,
        instructions: run.instructions,
        history,
        attachments,
        settings: run.settings,
        reportUsage,
        signal,
        emit,
        tools,
        saveArtifact: async (name, content, contentType) => {
          this.guard()
          const saved = await o.artifacts.save({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId }, { name: redact.text(name), content: redact.text(content), contentType })
          await emit('artifact.created', { ...saved })
          return saved
        },
        proposeKnowledge: async (draft) => {
          this.guard()
          return o.knowledge.propose({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId }, redact.deep(draft))
        },
        proposeSkill: async (proposal) => {
          this.guard()
          return o.skills.propose({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId }, redact.deep(proposal))
        },
        recall: async (raw) => {
          this.guard()
          const query = redact.text(raw)
          const { items } = await o.memory.recall(ref, query)
          await emit('memory.recalled', { query, itemIds: items.map((i) => i.id), count: items.length })
          return items
        }
      }
      const result = job ? await job.run(ctx, engine) : await engine.run(ctx)
      await flushDeltas()
      engineUsage = result.usage
      const output = redact.text(result.text)
      const invalid = outputViolation(run.settings, output)
      outcome = invalid === null ? { status: 'succeeded', facts: result.facts.map((f) => redact.text(f)), output } : { status: 'failed', error: invalid }
    } catch (err) {
      if (this.killed || err instanceof WorkerGone) return
      const reason = signal.aborted ? signal.reason : err
      if (reason instanceof CancelRequested) outcome = { status: 'cancelled' }
      else if (reason instanceof ShutdownRelease) {
        await this.release(run)
        return
      } else if (err instanceof EngineError) outcome = { status: 'failed', error: redact.text(err.message) }
      else {
        o.log.error({ err: redact.empty ? err : redactedError(redact, err), runId: run.id }, 'engine crashed')
        outcome = { status: 'failed', error: 'engine_error' }
      }
    }
    if (this.killed) return
    // a cancelled or failed run leaves no call waiting for a person
    if (outcome.status !== 'succeeded') await this.dropToolCalls(run.orgId, run.id)
    const usage: Usage | null = reported ?? engineUsage ?? null
    const next = await o.db.transaction(async (tx) => {
      const [finished] = await tx.update(runs).set({
        status: outcome.status,
        // a cancelled run keeps why (`interrupted`)
        error: outcome.status === 'failed' ? outcome.error : outcome.status === 'cancelled' ? sql`${runs.error}` : null,
        output: outcome.status === 'succeeded' ? outcome.output : null,
        finishedAt: sql`now()`,
        // what the engine reported, whatever the end (fleet usage sums it: usage_hours)
        ...(usage ? { inputTokens: usage.promptTokens, outputTokens: usage.completionTokens } : {}),
        leaseOwner: null,
        leaseExpiresAt: null
      }).where(and(eq(runs.id, run.id), eq(runs.status, 'running'), eq(runs.leaseOwner, this.instanceId))).returning({ id: runs.id })
      // the lease was lost meanwhile (a sweeper failed it): the sweeper's answer stands
      if (!finished) return []
      const data: Record<string, unknown> = outcome.status === 'failed' ? { error: outcome.error }
        : outcome.status === 'succeeded' ? { usage } : {}
      await appendEvent(tx, { orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, type: `run.${outcome.status}`, data })
      if (outcome.status === 'succeeded' && outcome.facts.length > 0) await o.memory.enqueueCapture(tx, ref, outcome.facts)
      const ended: FinishedRun = { id: run.id, orgId: run.orgId, rootRunId: run.rootRunId, userId: run.userId, status: outcome.status, metadata: run.metadata }
      const started: RunRow[] = []
      for (const followUps of o.followUps) {
        for (const followUp of await followUps.afterFinish(tx, ended)) started.push(await insertFollowUp(tx, followUp))
      }
      return started
    })
    // committed: a run.queued a killed instance cannot store is stored by the sweeper
    if (this.killed) return
    await announceCommitted(o.events, next, o.log)
  }

  /** The job a group does for this run (a wiki build), or null: the engine answers the prompt. */
  private async jobOf(run: RunRow): Promise<RunJob | null> {
    for (const jobs of this.o.jobs ?? []) {
      const job = await jobs.jobOf({
        id: run.id, orgId: run.orgId, rootRunId: run.rootRunId, realUserId: realUserIdOfRun(run), model: run.model, metadata: run.metadata
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
      throw new EngineError(err instanceof Error && 'statusCode' in err ? err.message : 'the run\'s secrets could not be read')
    }
    if (opened.missing.length > 0) throw new EngineError(`the run names secrets this organization no longer has: ${opened.missing.join(', ')}`)
    return { redact: new Redactor(opened.values), env: Object.fromEntries(opened.values.map((s) => [s.name, s.value])) }
  }

  /** Gives a run back to the queue (graceful shutdown that could not finish it). */
  private async release(run: RunRow): Promise<void> {
    await this.o.db.update(runs).set({ status: 'queued', startedAt: null, leaseOwner: null, leaseExpiresAt: null })
      .where(and(eq(runs.id, run.id), eq(runs.status, 'running'), eq(runs.leaseOwner, this.instanceId)))
  }

  private async renewLeases(): Promise<void> {
    if (this.killed || this.active.size === 0) return
    const ids = [...this.active.keys()]
    try {
      const rows = rowsOf<{ id: string; cancel_requested: boolean }>(await this.o.db.execute(sql`
        update runs set lease_expires_at = now() + make_interval(secs => ${this.o.leaseMs / 1000})
        where lease_owner = ${this.instanceId} and status = 'running' and id in (${sql.join(ids.map((id) => sql`${id}`), sql`, `)})
        returning id, cancel_requested`))
      const kept = new Set(rows.map((r) => r.id))
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
    for (const t of this.timers) clearInterval(t)
    this.timers = []
    for (const fn of this.unsubscribe) fn()
    this.unsubscribe = []
  }

  /**
   * Graceful stop: claim nothing more, let running runs finish within `graceMs`, then
   * hand the rest back to the queue for another instance.
   */
  async close(graceMs: number): Promise<void> {
    if (this.killed) return
    this.stopping = true
    const all = () => Promise.all([...this.active.values()].map((a) => a.done))
    let timer: NodeJS.Timeout | undefined
    const timedOut = await Promise.race([
      all().then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs)))
    ])
    clearTimeout(timer)
    if (timedOut) {
      for (const a of this.active.values()) a.controller.abort(new ShutdownRelease())
      await all()
    }
    this.stopTimers()
  }

  /** Simulates a crash: everything stops at once, nothing more is written; leases expire. */
  kill(): void {
    this.killed = true
    this.stopping = true
    this.stopTimers()
    for (const a of this.active.values()) a.controller.abort(new WorkerGone('killed'))
  }
}

type Usage = NonNullable<EngineResult['usage']>

/** A claimed run and the thread's earlier turns it is given (user and assistant messages). */
interface Claimed {
  run: RunRow
  history: ChatMessage[]
}

class ShutdownRelease extends Error {
  override name = 'ShutdownRelease'
}

/** An error fit for the log: its message and stack with the run's secret values redacted. */
function redactedError(redact: Redactor, err: unknown): { type: string; message: string; stack?: string | undefined } {
  const e = err instanceof Error ? err : new Error(String(err))
  return { type: e.name, message: redact.text(e.message), stack: e.stack === undefined ? undefined : redact.text(e.stack) }
}

/** A raw `runs` row (snake_case, from a hand-written statement) as drizzle would return it. */
function runFromRow(r: Record<string, unknown>): RunRow {
  return {
    id: r.id as string,
    orgId: r.org_id as string,
    rootRunId: r.root_run_id as string,
    parentRunId: (r.parent_run_id as string | null) ?? null,
    engine: r.engine as string,
    model: (r.model as string | null) ?? null,
    prompt: r.prompt as string,
    status: r.status as RunRow['status'],
    origin: r.origin as RunRow['origin'],
    error: (r.error as string | null) ?? null,
    metadata: jsonOf<Record<string, unknown> | null>(r.metadata) ?? {},
    secretNames: jsonOf<string[] | null>(r.secret_names) ?? [],
    userId: (r.user_id as string | null) ?? null,
    createdAt: dateOf(r.created_at),
    startedAt: dateOrNull(r.started_at),
    finishedAt: dateOrNull(r.finished_at),
    inputTokens: (r.input_tokens as number | null) ?? null,
    outputTokens: (r.output_tokens as number | null) ?? null,
    output: (r.output as string | null) ?? null,
    instructions: (r.instructions as string | null) ?? null,
    settings: jsonOf<RunRow['settings'] | null>(r.settings) ?? {},
    attachments: jsonOf<string[] | null>(r.attachments) ?? [],
    leaseOwner: (r.lease_owner as string | null) ?? null,
    leaseExpiresAt: dateOrNull(r.lease_expires_at),
    cancelRequested: boolOf(r.cancel_requested)
  }
}
