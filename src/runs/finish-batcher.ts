import type { Db } from '../db/client.js'
import { GroupCommit } from '../db/group-commit.js'
import { finishAll, type RunEnd } from './runs-repo.js'

/** How many runs' ends one statement may carry. */
const MAX_BATCH = 64

/** Thrown to the ends still waiting when their instance is killed: nothing more is written. */
export class FinishAbandoned extends Error {
  override name = 'FinishAbandoned'
}

/**
 * Group commit (src/db/group-commit.ts) for runs' ends (runs-repo.ts finishAll), as EventBatcher is for events:
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
  private readonly writes: GroupCommit<RunEnd, boolean>

  constructor(db: Db, instanceId: string) {
    this.writes = new GroupCommit({
      max: MAX_BATCH,
      many: (ends) => finishAll(db, instanceId, ends),
      one: async (end) => (await finishAll(db, instanceId, [end]))[0]!
    })
  }

  /** Stores the run's end; whether it did (see finishAll). */
  finish(end: RunEnd): Promise<boolean> {
    return this.writes.add(end)
  }

  /** The instance was killed: the ends not sent yet are never sent. */
  kill(): void {
    this.writes.stop(() => new FinishAbandoned('the worker was killed'))
  }
}
