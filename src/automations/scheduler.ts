import type { FastifyBaseLogger } from 'fastify'
import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { advance, claimDue, earliestTick, insertFires, type AutomationRow } from './automations-repo.js'
import { planFire } from './cron.js'
import type { AutomationTargets, PreparedRun } from './targets-port.js'
import type { AutomationRuns, QueuedRun } from '../runs/ports/automations.js'
import { agentOptionsOf } from '../runs/agent-options.js'
import { createWorkerLoop, type Clock, type WorkerLoop } from '../worker-loop.js'

export interface RunPlan {
  row: QueuedRun
  started?: PreparedRun['started']
}

/**
 * The run an automation starts (a fire, with its tick, or a trigger, with `scheduledFor:
 * null`), read in the transaction that stores it; null when its skill or playbook is gone.
 */
export async function planRun(
  tx: Tx,
  deps: { runs: Pick<AutomationRuns, 'engineFor'>; targets: AutomationTargets },
  a: AutomationRow,
  scheduledFor: Date | null
): Promise<RunPlan | null> {
  const target = a.target
  let prepared: PreparedRun | null
  let chosen: { engine: string; model: string | null }
  if ('prompt' in target) {
    // checked when the automation was saved (agentOptionsOf): the run's configuration; a
    // schema saved under earlier rules is not refused here, where a throw would stop the batch
    prepared = { prompt: target.prompt, metadata: {}, ...agentOptionsOf(target, '/body', true) }
    chosen = await deps.runs.engineFor(tx, a.orgId, target.engine, target.model)
  } else {
    prepared =
      'skillId' in target
        ? await deps.targets.skill(tx, a.orgId, target.skillId, target.input)
        : await deps.targets.playbook(tx, a.orgId, target.playbookId, target.input)
    chosen = await deps.runs.engineFor(tx, a.orgId, undefined, undefined)
  }
  if (!prepared) return null
  const id = newId()
  return {
    row: {
      id,
      orgId: a.orgId,
      rootRunId: id,
      engine: chosen.engine,
      model: chosen.model,
      prompt: prepared.prompt,
      origin: 'automation',
      instructions: prepared.instructions ?? null,
      settings: prepared.settings ?? {},
      attachments: prepared.attachments ?? [],
      metadata: { ...prepared.metadata, automationId: a.id, scheduledFor: scheduledFor?.toISOString() ?? null },
      userId: a.createdBy
    },
    ...(prepared.started ? { started: prepared.started } : {})
  }
}

export interface SchedulerOptions {
  db: Db
  clock: Clock
  runs: AutomationRuns
  targets: AutomationTargets
  log: FastifyBaseLogger
  pollMs: number
  graceMs: number
  /** automations claimed per transaction */
  batch: number
}

/**
 * Fires due automations. Every instance runs one; they share the due rows through
 * `FOR UPDATE SKIP LOCKED`, and a tick is fired by inserting its `automation_fires` row
 * (unique on automation and tick) in the transaction that inserts its run, so each tick
 * starts exactly one run whatever the number of instances and whenever one dies.
 * Time is the scheduler's clock (`Clock`), never the database's: it decides which ticks
 * are due and stamps `firedAt`.
 */
export class AutomationScheduler {
  private readonly o: SchedulerOptions
  private killed = false
  private readonly loop: WorkerLoop<never>
  /** test seam: runs inside each fire transaction just before it commits */
  beforeCommit: ((tx: Tx) => Promise<void>) | null = null

  constructor(options: SchedulerOptions) {
    this.o = options
    this.loop = createWorkerLoop<never>({
      name: 'scheduler',
      log: options.log,
      // each batch is claimed and fired in one transaction: nothing is left to work on after
      claim: async () => {
        await this.fireDue()
        return null
      },
      pollMs: options.pollMs,
      idleMs: async () => {
        const tick = await earliestTick(this.o.db)
        // at least a few milliseconds: a due row another instance holds must not make this one spin
        return tick
          ? Math.max(5, Math.min(this.o.pollMs, tick.getTime() - this.o.clock.now().getTime()))
          : this.o.pollMs
      },
      drain: 'finish'
    })
  }

  start(): void {
    if (!this.killed) this.loop.start()
  }

  /** Looks again now (an automation changed on this instance). */
  wake(): void {
    this.loop.wake()
  }

  /** Stops firing; waits for the pass in flight, at most `deadlineMs`. */
  async stop(deadlineMs?: number): Promise<void> {
    await this.loop.stop(deadlineMs)
  }

  /** Simulates a crash: nothing more is written or announced. */
  kill(): void {
    this.killed = true
    this.loop.kill()
  }

  /** Fires every tick due at `now` (the clock's by default); answers how many runs it started. */
  async fireDue(now: Date = this.o.clock.now()): Promise<number> {
    let started = 0
    const announcing: Array<Promise<void>> = []
    for (;;) {
      if (this.killed) break
      const { claimed, runs } = await this.o.db.transaction(async (tx) => {
        const due = await claimDue(tx, now, this.o.batch)
        const plans: Array<RunPlan & { automationId: string; tick: Date }> = []
        // one engine lookup per org, engine and model in a batch, not per automation
        const engines = new Map<string, Promise<{ engine: string; model: string | null }>>()
        const chosenEngines = {
          engineFor: (on: Tx, orgId: string, engine: string | undefined, model: string | undefined) => {
            const key = `${orgId}\u0000${engine ?? ''}\u0000${model ?? ''}`
            let chosen = engines.get(key)
            if (!chosen) engines.set(key, (chosen = this.o.runs.engineFor(on, orgId, engine, model)))
            return chosen
          }
        }
        const moves = new Map<string, { id: string; next: Date | null; firedAt: Date | null; runId: string | null }>()
        // automations sharing a schedule and a tick (the common crons) are planned once
        const planned = new Map<string, ReturnType<typeof planFire>>()
        for (const a of due) {
          const key = `${a.cron}\u0000${a.timezone}\u0000${a.catchUp}\u0000${a.nextFireAt!.getTime()}`
          let plan = planned.get(key)
          if (!plan) planned.set(key, (plan = planFire(a, a.nextFireAt!, now, this.o.graceMs)))
          moves.set(a.id, { id: a.id, next: plan.next, firedAt: null, runId: null })
          if (!plan.fire) continue
          const run = await planRun(tx, { runs: chosenEngines, targets: this.o.targets }, a, plan.fire)
          if (run) plans.push({ ...run, automationId: a.id, tick: plan.fire })
        }
        // the batch's own time: later batches of one pass are later
        const firedAt = this.o.clock.now()
        const won = await insertFires(
          tx,
          plans.map((p) => ({
            automationId: p.automationId,
            scheduledFor: p.tick,
            orgId: p.row.orgId,
            firedAt,
            runId: p.row.id
          }))
        )
        const winners = plans.filter((p) => won.has(p.automationId))
        const runs = await this.o.runs.insert(
          tx,
          winners.map((p) => p.row)
        )
        for (const p of winners) {
          await p.started?.(tx, p.row)
          moves.set(p.automationId, { ...moves.get(p.automationId)!, firedAt, runId: p.row.id })
        }
        await advance(tx, [...moves.values()])
        if (this.beforeCommit) await this.beforeCommit(tx)
        return { claimed: due.length, runs }
      })
      // committed: a run.queued not stored now (or by a killed instance) is stored by the runs sweeper
      if (this.killed) break
      // announced while the next batch fires: a due tick never waits for the last batch's events
      announcing.push(this.o.runs.announce(runs))
      started += runs.length
      if (claimed < this.o.batch) break
    }
    await Promise.all(announcing)
    return started
  }
}
