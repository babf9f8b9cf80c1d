import type { Tx } from '../db/client.js'

/**
 * The seam between runs and the Memory Hub. The runs group calls these; the memory
 * group implements them. Until memory is wired in, runs use `noRunMemory`.
 */

/** The run a memory operation is made for. */
export interface RunRef {
  id: string
  rootRunId: string
  orgId: string
  /** the real signed-in user who started the run, or null (API key, dev org, automation) */
  realUserId: string | null
}

export interface RecalledItem {
  id: string
  content: string
  sourceScope: 'org' | 'personal'
  score: number
}

export interface RunMemory {
  /**
   * Recalls from the run's pools (the org pool, plus the personal pool when the run has
   * a real user) and records one recall frame per retrieval in the ledger.
   */
  recall(run: RunRef, query: string): Promise<{ items: RecalledItem[] }>
  /**
   * Called inside the transaction that finishes the run: writes the run's capture
   * outbox row (state `pending`) when there are facts to keep. It commits or rolls back
   * with the run.
   */
  enqueueCapture(tx: Tx, run: RunRef, facts: string[]): Promise<void>
}

/** Memory off: nothing recalled, nothing captured. */
export const noRunMemory: RunMemory = {
  async recall() {
    return { items: [] }
  },
  async enqueueCapture() {}
}

/**
 * The reverse direction: the memory outbox reports a delivered capture so the runs group
 * can store and stream a `memory.captured` event for that run.
 */
export interface RunEventSink {
  emit(event: { orgId: string; runId: string; type: string; data: Record<string, unknown> }): Promise<void>
}
