import type { Db } from '../db/client.js'
import { isDatabaseUnavailable } from '../db/faults.js'
import { finishAll, type RunEnd } from './runs-repo.js'

/** How many runs' ends one statement may carry. */
const MAX_BATCH = 64

interface Pending {
  end: RunEnd
  resolve: (finished: boolean) => void
  reject: (err: unknown) => void
}

/** Thrown to the ends still waiting when their instance is killed: nothing more is written. */
export class FinishAbandoned extends Error {
  override name = 'FinishAbandoned'
}

/**
 * Group commit for runs' ends (runs-repo.ts finishAll), as EventBatcher is for events:
 * while one statement of ends is in flight, the ends that come meanwhile wait, and go
 * together as the next one. Idle, an end is one statement as before; under load, the
 * round trip, the commit and each org's event lock are shared by every end that arrived
 * meanwhile, where each took its turn under its org's lock. Each end's answer is its own
 * (false: the worker no longer holds the run, or it kept facts), and the statement is one
 * transaction: an end is stored whole or not at all, like its neighbours'. A failure
 * fails them all when the database is away (their writers retry, as for a run ended
 * alone); any other failure is retried end by end, so one bad end does not fail the rest.
 * Killed, the instance writes nothing more: the ends still waiting are abandoned (their
 * runs are the sweeper's, as when a kill comes before a run's end is sent).
 */
export class FinishBatcher {
  private queue: Pending[] = []
  private flushing = false
  private killed = false
  private readonly db: Db
  private readonly instanceId: string

  constructor(db: Db, instanceId: string) {
    this.db = db
    this.instanceId = instanceId
  }

  /** Stores the run's end; whether it did (see finishAll). */
  finish(end: RunEnd): Promise<boolean> {
    if (this.killed) return Promise.reject(new FinishAbandoned('the worker was killed'))
    return new Promise((resolve, reject) => {
      this.queue.push({ end, resolve, reject })
      if (!this.flushing) void this.flush()
    })
  }

  /** The instance was killed: the ends not sent yet are never sent. */
  kill(): void {
    this.killed = true
    for (const p of this.queue.splice(0)) p.reject(new FinishAbandoned('the worker was killed'))
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      while (this.queue.length > 0 && !this.killed) {
        const batch = this.queue.splice(0, MAX_BATCH)
        try {
          const finished = await finishAll(
            this.db,
            this.instanceId,
            batch.map((p) => p.end)
          )
          batch.forEach((p, i) => p.resolve(finished[i]!))
        } catch (err) {
          if (batch.length === 1 || isDatabaseUnavailable(err) || this.killed) for (const p of batch) p.reject(err)
          else
            for (const p of batch)
              await finishAll(this.db, this.instanceId, [p.end]).then(([finished]) => p.resolve(finished!), p.reject)
        }
      }
    } finally {
      this.flushing = false
    }
  }
}
