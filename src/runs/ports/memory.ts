import type { Tx } from '../../db/client.js'

/**
 * The seam between runs and the Memory Hub. The runs group calls these; the memory
 * group implements them (with memory off, it recalls nothing and captures nothing).
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
  /** the full-text and vector scores and their fusion (absent from a test's fake memory) */
  scores?: { fulltext: number | null; semantic: number | null; fused: number } | undefined
}

/** A fact to capture when a run ends: for the org pool, or the personal pool of the run's real user. */
export interface CapturedFact {
  content: string
  scope: 'org' | 'personal'
}

export interface RunMemory {
  /** memory is on for the org (a backend, and the org has not switched it off) */
  enabled(orgId: string): Promise<boolean>
  /**
   * Both switches in one read, for a run: memory on (as `enabled`), and whether the org
   * asked for facts to be extracted from its succeeded runs
   */
  settingsFor(orgId: string): Promise<{ enabled: boolean; extract: boolean }>
  /**
   * Recalls from the run's pools (the org pool, plus the personal pool when the run has
   * a real user) and records one recall frame per retrieval in the ledger. A `prompt`
   * recall searches the prompt's significant words (any of them) for at most
   * MEMORY_RECALL_LIMIT items; a `query` recall (the memory_search tool) searches the
   * query as the Hub's search does, for at most `limit`. `query` in the answer is what
   * was searched.
   */
  recall(
    run: RunRef,
    text: string,
    options: ({ kind: 'prompt' } | { kind: 'query'; limit: number }) & {
      /** memory on or off as the caller already read it (settingsFor); read here when absent */
      enabled?: boolean | undefined
      /** how to rank: `hybrid` (default where vectors exist), `semantic` or `fulltext` */
      mode?: 'hybrid' | 'semantic' | 'fulltext' | undefined
    }
  ): Promise<{
    items: RecalledItem[]
    query: string
    /** the org's settings when the recall read them itself (`enabled` not given), as settingsFor answers */
    settings?: { enabled: boolean; extract: boolean } | undefined
  }>
  /**
   * Called inside the transaction that ends the run: writes the run's capture outbox row
   * (state `pending`) when there are facts to keep (a string is an org fact). It commits or
   * rolls back with the run.
   */
  enqueueCapture(tx: Tx, run: RunRef, facts: Array<string | CapturedFact>): Promise<void>
}

/**
 * The reverse direction: the memory outbox reports a delivered capture so the runs group
 * can store and stream a `memory.captured` event for that run.
 */
export interface RunEventSink {
  emit(event: { orgId: string; runId: string; type: string; data: Record<string, unknown> }): Promise<void>
}
