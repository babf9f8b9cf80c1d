import { sql } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, type Db } from '../db/client.js'
import { appendEvent, pruneEvents, type EventBatcher } from './events.js'
import { announceQueued, ENDED_COLUMNS, endedOf, type OnRunsEnded } from './runs-repo.js'
import type { ToolGatewayPort } from './ports/tool-gateway.js'
import { dropToolCalls } from './worker.js'
import { pruneAttempts } from '../runtime/attempts-repo.js'
import { createWorkerLoop, systemClock, type Clock, type WorkerLoop } from '../worker-loop.js'

/** A queued run still without its run.queued this long after it was created is announced by the sweeper. */
export const UNANNOUNCED_AFTER_MS = 5000
/** How often events and tool call attempts past their retention are deleted. */
const PRUNE_EVERY_MS = 60 * 60 * 1000

export interface RunSweeperOptions {
  db: Db
  /** where a late run.queued goes (the same batcher dispatch uses) */
  events: EventBatcher
  /** the agent runtime's tool gateway: a lost run's calls waiting for approval die with it */
  tools: ToolGatewayPort | null
  log: FastifyBaseLogger
  sweepMs: number
  /** how long events, and the tool call attempts of ended runs, are kept */
  retentionDays: number
  /** where the retention window is measured from (tests move it instead of backdating rows) */
  clock?: Clock | undefined
  /** told of the runs it fails (their remembered facts are captured) */
  onEnded?: OnRunsEnded | undefined
}

/**
 * The housekeeping every instance does for runs, whichever instance they ran on: fails
 * runs whose lease expired (their worker is gone: `worker_lost`), announces runs whose
 * instance died before storing their `run.queued`, and deletes events past retention (and the
 * tool call attempts of ended runs, with the same retention).
 * Each step is a guarded statement, so any number of instances sweep side by side.
 */
export class RunSweeper {
  private readonly o: RunSweeperOptions
  private readonly loop: WorkerLoop<never>
  private stopped = false

  constructor(options: RunSweeperOptions) {
    this.o = options
    this.loop = createWorkerLoop<never>({
      name: 'run sweeper',
      log: options.log,
      pollMs: options.sweepMs,
      every: [
        { everyMs: options.sweepMs, job: () => this.sweep() },
        { everyMs: PRUNE_EVERY_MS, job: () => this.prune() }
      ]
    })
  }

  start(): void {
    this.loop.start()
  }

  /** Nothing new starts; waits for a sweep in flight, at most `deadlineMs`. */
  async stop(deadlineMs?: number): Promise<void> {
    this.stopped = true
    await this.loop.stop(deadlineMs)
  }

  /** A crash: nothing more starts, nothing is awaited. */
  kill(): void {
    this.stopped = true
    this.loop.kill()
  }

  /** One sweep now; returns how many lost runs it failed. */
  async sweep(): Promise<number> {
    if (this.stopped) return 0
    const { db, log } = this.o
    let swept = 0
    try {
      // a run whose instance died between committing it and storing its run.queued would
      // never be claimed: announce it here once it is clearly not coming
      const silent = rowsOf<{ id: string; org_id: string; root_run_id: string; engine: string; model: string | null }>(
        await db.execute(sql`
        select id, org_id, root_run_id, engine, model from runs r
        where status = 'queued' and created_at < now() - make_interval(secs => ${UNANNOUNCED_AFTER_MS / 1000})
          and not exists (select 1 from run_events e where e.run_id = r.id and e.type = 'run.queued')
        limit 100`)
      )
      for (const run of silent) {
        await announceQueued(this.o.events, {
          id: run.id,
          orgId: run.org_id,
          rootRunId: run.root_run_id,
          engine: run.engine,
          model: run.model
        })
      }
      const expired = rowsOf<{ id: string }>(
        await db.execute(sql`
        select id from runs where status = 'running' and lease_expires_at < now() order by lease_expires_at limit 100`)
      )
      for (const { id } of expired) {
        const orgId = await db.transaction(async (tx) => {
          const [run] = rowsOf<Record<string, unknown>>(
            await tx.execute(sql`
            update runs set status = 'failed', error = 'worker_lost', finished_at = now(), lease_owner = null, lease_expires_at = null
            where id = ${id} and status = 'running' and lease_expires_at < now()
            returning ${ENDED_COLUMNS}`)
          ).map(endedOf)
          if (!run) return null
          await appendEvent(tx, {
            orgId: run.orgId,
            runId: run.id,
            rootRunId: run.rootRunId,
            type: 'run.failed',
            data: { error: 'worker_lost' }
          })
          await this.o.onEnded?.(tx, [run])
          return run.orgId
        })
        if (orgId !== null) {
          swept++
          await dropToolCalls(this.o.tools, log, orgId, id)
        }
      }
    } catch (err) {
      if (!this.stopped) log.warn({ err }, 'run sweeper: sweep failed')
    }
    return swept
  }

  /** Deletes events and ended runs' tool call attempts past the retention window now; returns how many went. */
  async prune(): Promise<number> {
    if (this.stopped) return 0
    const before = new Date((this.o.clock ?? systemClock).now().getTime() - this.o.retentionDays * 86_400_000)
    try {
      return (await pruneEvents(this.o.db, before)) + (await pruneAttempts(this.o.db, before))
    } catch (err) {
      this.o.log.warn({ err }, 'run sweeper: prune failed')
      return 0
    }
  }
}
