import { and, eq, sql } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { Db } from '../db/client.js'
import { integrations } from '../integrations/tables.js'
import { backoffDelay, createWorkerLoop, type Clock, type WorkerLoop } from '../worker-loop.js'
import type { SlackCallError, SlackFailure } from './web-api.js'

/** Slack refusals that another attempt would meet again: the row is given up at once. */
const PERMANENT = new Set([
  'invalid_auth',
  'not_authed',
  'account_inactive',
  'token_revoked',
  'token_expired',
  'no_permission',
  'missing_scope',
  'channel_not_found',
  'not_in_channel',
  'is_archived',
  'msg_too_long',
  'no_text',
  'restricted_action',
  'team_access_not_granted',
  'ekm_access_denied',
  'invalid_arguments',
  'invalid_metadata_format',
  'invalid_metadata_schema',
  'invalid_blocks',
  'invalid_blocks_format'
])
/** Refusals after which Slack says part of the call may have happened. */
const MAYBE_DONE = new Set(['internal_error', 'fatal_error', 'request_timeout', 'service_unavailable'])
/** Refusals about the token: the integration shows them as its lastError. */
const TOKEN_ERRORS = new Set(['invalid_auth', 'not_authed', 'account_inactive', 'token_revoked', 'token_expired'])

const MAX_BACKOFF_MS = 10 * 60 * 1000
/** How often an outbox checks its rows against the runs' state (the bus is the fast path). */
export const SWEEP_EVERY_MS = 30_000
/** How long a bus event waits before the outbox looks (events close together share one claim). */
const WAKE_DELAY_MS = 20

/** Whether a failed call may still have posted. */
export function maybeDone(f: SlackFailure): boolean {
  return f.kind === 'unavailable' || (f.kind === 'refused' && MAYBE_DONE.has(f.error))
}

/**
 * What a failed post means for the row that made it: given up (a refusal that would repeat,
 * or the last attempt), else tried again after a backoff (a 429 waits its Retry-After). A
 * refused token is also shown as the integration's lastError.
 */
export async function planAfterFailure(
  db: Db,
  orgId: string,
  err: SlackCallError,
  attempts: number,
  o: { maxAttempts: number; retryBaseMs: number }
): Promise<{ giveUp: boolean; delayMs: number }> {
  const f = err.failure
  if (f.kind === 'refused' && TOKEN_ERRORS.has(f.error)) {
    await db
      .update(integrations)
      .set({ lastError: `Slack refused the bot token (${f.error}); connect Slack again`, updatedAt: sql`now()` })
      .where(and(eq(integrations.orgId, orgId), eq(integrations.kind, 'slack')))
  }
  const permanent = f.kind === 'refused' && PERMANENT.has(f.error)
  return {
    giveUp: permanent || attempts >= o.maxAttempts,
    delayMs:
      f.kind === 'rate_limited' ? f.retryAfterSeconds * 1000 : backoffDelay(attempts, o.retryBaseMs, MAX_BACKOFF_MS)
  }
}

/**
 * The loop an outbox of Slack posts runs in each instance (src/worker-loop.ts): a poll,
 * wake-ups from the event bus (a little delayed, so that events close together share one
 * claim), one round at a time (a wake-up during a round runs another after it), and a stop
 * that waits for the round in flight within its deadline, or a kill that abandons it (a
 * crash, in tests). Subclasses claim and post.
 */
export abstract class OutboxLoop<Row extends { runId: string } = { runId: string }> {
  /** until start(): an outbox this instance does not run (SLACK_OUTBOX=false) claims nothing */
  protected stopped = true
  protected killed = false
  private worker: WorkerLoop<Row[]> | null = null
  /** when this outbox last claimed, in its clock's milliseconds */
  private claimedAt = 0
  private readonly loop: { log: FastifyBaseLogger; clock: Clock; pollMs: number; what: string }

  protected constructor(loop: { log: FastifyBaseLogger; clock: Clock; pollMs: number; what: string }) {
    this.loop = loop
  }

  /** Starts the poll, with the bus listeners and the periodic jobs of the outbox. */
  protected begin(unsubscribers: Array<() => void>, every: Array<[ms: number, job: () => Promise<unknown>]>): void {
    this.stopped = false
    this.worker = createWorkerLoop<Row[]>({
      name: this.loop.what,
      log: this.loop.log,
      // a round: what the bus announced becomes due, then the due rows are claimed until none is left
      claim: async () => {
        // announcements that made nothing due (most runs are not Slack's) need no claim: rows
        // due later (retries) are the poll's, which claims at its own pace
        const due = await this.beforeRound()
        const now = this.loop.clock.now().getTime()
        if (due === 0 && now - this.claimedAt < this.loop.pollMs) return null
        this.claimedAt = now
        const rows = await this.claim()
        return rows.length > 0 ? rows : null
      },
      work: (rows) => this.post(rows),
      pollMs: this.loop.pollMs,
      wakeDelayMs: WAKE_DELAY_MS,
      listen: () => unsubscribers,
      every: every.map(([everyMs, job]) => ({ everyMs, job })),
      drain: 'finish'
    })
    this.worker.start()
  }

  /** Something became due on some instance: look a moment later. */
  protected wakeSoon(): void {
    this.worker?.wakeSoon()
  }

  /** Looks for due rows now. */
  wake(): void {
    this.worker?.wake()
  }

  /** Stops claiming and waits for the round in flight, at most `deadlineMs`. */
  async stop(deadlineMs?: number): Promise<void> {
    this.stopped = true
    await this.worker?.stop(deadlineMs)
  }

  /** A crash: nothing more is recorded; claimed rows wait for their lease to expire. */
  kill(): void {
    this.killed = true
    this.stopped = true
    this.worker?.kill()
  }

  /**
   * What the bus announced since the last round becomes due (one statement); never throws.
   * How many rows became due, 0 when the announcements matched none, null when there were
   * none (or the statement failed: the claim looks anyway).
   */
  protected abstract beforeRound(): Promise<number | null>

  /** One claim-and-post round: each claimed row posted at once; how many rows it claimed. */
  async runOnce(): Promise<number> {
    const claimed = await this.claim()
    await this.post(claimed)
    return claimed.length
  }

  private async post(claimed: Row[]): Promise<void> {
    await Promise.all(
      claimed.map((row) =>
        this.deliver(row).catch((err: unknown) => {
          if (!this.killed)
            this.loop.log.error({ err, runId: row.runId }, `${this.loop.what}: a post failed unexpectedly`)
        })
      )
    )
  }

  /** Claims the due rows under a lease (one statement). */
  protected abstract claim(): Promise<Row[]>

  /** Posts one claimed row and records what came of it. */
  protected abstract deliver(row: Row): Promise<void>
}
