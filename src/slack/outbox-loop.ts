import { and, eq, sql } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { Db } from '../db/client.js'
import { integrations } from '../integrations/tables.js'
import { backoffDelay } from '../memory/capture-worker.js'
import type { SlackCallError, SlackFailure } from './web-api.js'

/** Slack refusals that another attempt would meet again: the row is given up at once. */
const PERMANENT = new Set([
  'invalid_auth', 'not_authed', 'account_inactive', 'token_revoked', 'token_expired', 'no_permission', 'missing_scope',
  'channel_not_found', 'not_in_channel', 'is_archived', 'msg_too_long', 'no_text', 'restricted_action', 'team_access_not_granted',
  'ekm_access_denied', 'invalid_arguments', 'invalid_metadata_format', 'invalid_metadata_schema', 'invalid_blocks', 'invalid_blocks_format'
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
export async function planAfterFailure(db: Db, orgId: string, err: SlackCallError, attempts: number, o: { maxAttempts: number; retryBaseMs: number }): Promise<{ giveUp: boolean; delayMs: number }> {
  const f = err.failure
  if (f.kind === 'refused' && TOKEN_ERRORS.has(f.error)) {
    await db.update(integrations).set({ lastError: `Slack refused the bot token (${f.error}); connect Slack again`, updatedAt: sql`now()` })
      .where(and(eq(integrations.orgId, orgId), eq(integrations.kind, 'slack')))
  }
  const permanent = f.kind === 'refused' && PERMANENT.has(f.error)
  return {
    giveUp: permanent || attempts >= o.maxAttempts,
    delayMs: f.kind === 'rate_limited' ? f.retryAfterSeconds * 1000 : backoffDelay(attempts, o.retryBaseMs, MAX_BACKOFF_MS)
  }
}

/**
 * The loop an outbox of Slack posts runs in each instance: a poll timer, wake-ups from the
 * event bus (a little delayed, so that events close together share one claim), one round at
 * a time (a wake-up during a round runs another after it), and a stop that waits for the
 * round in flight, or a kill that abandons it (a crash, in tests). Subclasses claim and post.
 */
export abstract class OutboxLoop<Row extends { runId: string } = { runId: string }> {
  /** until start(): an outbox this instance does not run (SLACK_OUTBOX=false) claims nothing */
  protected stopped = true
  protected killed = false
  private timers: NodeJS.Timeout[] = []
  private unsubscribers: Array<() => void> = []
  private looping: Promise<void> | null = null
  private again = false
  private soon: NodeJS.Timeout | null = null
  private readonly loop: { log: FastifyBaseLogger; pollMs: number; what: string }

  protected constructor(loop: { log: FastifyBaseLogger; pollMs: number; what: string }) {
    this.loop = loop
  }

  /** Starts the poll timer, with the bus listeners and the periodic jobs of the outbox. */
  protected begin(unsubscribers: Array<() => void>, every: Array<[ms: number, job: () => void]>): void {
    this.stopped = false
    this.unsubscribers = unsubscribers
    this.timers.push(setInterval(() => this.wake(), this.loop.pollMs))
    for (const [ms, job] of every) this.timers.push(setInterval(job, ms))
    for (const t of this.timers) t.unref()
  }

  /** Something became due on some instance: look a moment later. */
  protected wakeSoon(): void {
    if (this.soon || this.stopped) return
    this.soon = setTimeout(() => {
      this.soon = null
      this.wake()
    }, WAKE_DELAY_MS)
    this.soon.unref()
  }

  /** Looks for due rows now. */
  wake(): void {
    if (this.stopped) return
    if (this.looping) {
      this.again = true
      return
    }
    this.looping = (async () => {
      do {
        this.again = false
        try {
          await this.beforeRound()
          while (!this.stopped && (await this.runOnce()) > 0) { /* until nothing is due */ }
        } catch (err) {
          if (!this.stopped) this.loop.log.warn({ err }, `${this.loop.what}: claiming failed`)
        }
      } while (this.again && !this.stopped)
    })().finally(() => {
      this.looping = null
    })
  }

  /** Stops claiming and waits for the round in flight. */
  async stop(): Promise<void> {
    this.stopped = true
    for (const t of this.timers) clearInterval(t)
    this.timers = []
    if (this.soon) clearTimeout(this.soon)
    this.soon = null
    for (const unsubscribe of this.unsubscribers) unsubscribe()
    this.unsubscribers = []
    // a killed outbox abandons what it was doing (a post in flight records nothing)
    if (!this.killed) await this.looping
  }

  /** A crash: nothing more is recorded; claimed rows wait for their lease to expire. */
  kill(): void {
    this.killed = true
    void this.stop()
  }

  /** What the bus announced since the last round becomes due (one statement); never throws. */
  protected abstract beforeRound(): Promise<void>

  /** One claim-and-post round: each claimed row posted at once; how many rows it claimed. */
  async runOnce(): Promise<number> {
    const claimed = await this.claim()
    await Promise.all(claimed.map((row) => this.deliver(row).catch((err: unknown) => {
      if (!this.killed) this.loop.log.error({ err, runId: row.runId }, `${this.loop.what}: a post failed unexpectedly`)
    })))
    return claimed.length
  }

  /** Claims the due rows under a lease (one statement). */
  protected abstract claim(): Promise<Row[]>

  /** Posts one claimed row and records what came of it. */
  protected abstract deliver(row: Row): Promise<void>
}
