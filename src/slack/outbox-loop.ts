import { and, eq, sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { rowsOf, type Db } from '../db/client.js'
import { integrations } from '../integrations/tables.js'
import { backoffDelay, createWorkerLoop, type Clock, type WorkerLoop } from '../worker-loop.js'
import { SlackCallError, type SlackApi, type SlackFailure } from './web-api.js'
import type { EventBus } from '../../plugins/event-bus.js'

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

/** What both outboxes of Slack posts are given: the same SLACK_OUTBOX settings and bot token. */
export interface PostOutboxOptions {
  db: Db
  api: SlackApi
  bus: EventBus
  log: FastifyBaseLogger
  /** the time of its claims (the app's, which tests move) */
  clock: Clock
  /** the org's bot token, or null when it has none (disconnected) */
  botToken(orgId: string): Promise<string | null>
  pollMs: number
  leaseMs: number
  retryBaseMs: number
  maxAttempts: number
  /** rows claimed per round, and posted at once */
  batch: number
}

/** The table of an outbox: its rows go pending → posting (leased) → sent, failed (or an outbox's own end). */
export interface OutboxTable {
  /** the table's name */
  name: string
  /** its primary key column */
  key: string
  /** the column Slack's ts of the posted message is recorded in */
  tsColumn: string
  /** the columns a claim returns (the key, run_id, org_id, attempts and uncertain among them) */
  returning: string[]
  /** the noun the outbox's log lines and give-up reasons use for a row ('reply', 'message') */
  noun: string
}

/** What every claimed row carries, whichever outbox claimed it. */
export interface ClaimedPost {
  /** the row's primary key */
  key: string | number
  runId: string
  orgId: string
  attempts: number
  /** an earlier attempt may have posted: look in the thread first */
  uncertain: boolean
}

/**
 * An outbox of Slack posts, one row per message to post exactly once, on any number of
 * instances. It runs in the loop of every background job (src/worker-loop.ts): a poll,
 * wake-ups from the event bus (a little delayed, so that events close together share one
 * claim), one round at a time (a wake-up during a round runs another after it), and a stop
 * that waits for the round in flight within its deadline, or a kill that abandons it (a
 * crash, in tests).
 *
 * Delivery is the same for every outbox: due rows are claimed with `FOR UPDATE SKIP LOCKED`
 * under a lease, so instances share the table and a row whose instance died is taken over
 * when its lease expires; success is recorded in one conditional statement with Slack's ts
 * (and clears a token failure the integration showed); a failure backs off (a 429 waits its
 * Retry-After) or gives up; every post carries its run as message metadata, and an attempt
 * after one whose outcome is unknown (a lost answer, a 5xx, an instance that died mid-post)
 * first looks for the earlier post in the thread and records it instead of posting again.
 *
 * An outbox says what makes its rows due (`beforeRound`, its sweeps), how a claimed row
 * reads (`rowOf`), and how its message is looked for and posted (`find`, `send`);
 * `prepare` may settle a row before any call to Slack, `afterSent` follows a recorded post.
 */
export abstract class PostOutbox<Row extends ClaimedPost, Prepared = unknown> {
  /** until start(): an outbox this instance does not run (SLACK_OUTBOX=false) claims nothing */
  protected stopped = true
  protected killed = false
  private worker: WorkerLoop<Row[]> | null = null
  /** when this outbox last claimed, in its clock's milliseconds */
  private claimedAt = 0
  protected readonly o: PostOutboxOptions
  /** the outbox's name in logs and in the worker loop */
  protected readonly what: string
  private readonly table: OutboxTable

  protected constructor(options: PostOutboxOptions, what: string, table: OutboxTable) {
    this.o = options
    this.what = what
    this.table = table
  }

  /** Starts the poll, with the bus listeners and the periodic jobs of the outbox. */
  protected begin(unsubscribers: Array<() => void>, every: Array<[ms: number, job: () => Promise<unknown>]>): void {
    this.stopped = false
    this.worker = createWorkerLoop<Row[]>({
      name: this.what,
      log: this.o.log,
      // a round: what the bus announced becomes due, then the due rows are claimed until none is left
      claim: async () => {
        // announcements that made nothing due (most runs are not Slack's) need no claim: rows
        // due later (retries) are the poll's, which claims at its own pace
        const due = await this.beforeRound()
        const now = this.o.clock.now().getTime()
        if (due === 0 && now - this.claimedAt < this.o.pollMs) return null
        this.claimedAt = now
        const rows = await this.claim()
        return rows.length > 0 ? rows : null
      },
      work: (rows) => this.post(rows),
      pollMs: this.o.pollMs,
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
          if (!this.killed) this.o.log.error({ err, runId: row.runId }, `${this.what}: a post failed unexpectedly`)
        })
      )
    )
  }

  /**
   * The statement that claims due rows under a lease (one statement): `claimed`, the update
   * itself, by default; an outbox may read more with each row around it.
   */
  protected claimStatement(claimed: SQL): SQL {
    return claimed
  }

  /** A claimed row of the statement's answer, read. */
  protected abstract rowOf(row: Record<string, unknown>): Row

  /** Claims the due rows under a lease (one statement). */
  private async claim(): Promise<Row[]> {
    const { o, table } = this
    const name = sql.raw(table.name)
    const key = sql.raw(table.key)
    const claimed = sql`
      update ${name} o
      set state = 'posting', attempts = o.attempts + 1, uncertain = (o.uncertain or o.state = 'posting'),
          lease_expires_at = now() + make_interval(secs => ${o.leaseMs / 1000})
      where o.${key} in (
        select m.${key} from ${name} m
        where (m.state = 'pending' and m.next_attempt_at <= now()) or (m.state = 'posting' and m.lease_expires_at < now())
        order by m.next_attempt_at
        limit ${o.batch}
        for update skip locked)
      returning ${sql.raw(table.returning.map((column) => `o.${column}`).join(', '))}`
    return rowsOf<Record<string, unknown>>(await o.db.execute(this.claimStatement(claimed))).map((r) => this.rowOf(r))
  }

  /** A conditional move of a claimed row: nothing when it moved on (another instance took it over). */
  protected async settle(row: Row, set: SQL): Promise<boolean> {
    if (this.killed) return false
    const key = sql.raw(this.table.key)
    const result = await this.o.db.execute(sql`
      update ${sql.raw(this.table.name)} set ${set}, lease_expires_at = null
      where ${key} = ${row.key} and state = 'posting' and attempts = ${row.attempts}
      returning ${key}`)
    return rowsOf(result).length === 1
  }

  /** Records the post as sent with its ts, and clears a token failure the integration showed, in one statement. */
  private async sent(row: Row, ts: string): Promise<boolean> {
    if (this.killed) return false
    const rows = rowsOf(
      await this.o.db.execute(sql`
      with sent as (
        update ${sql.raw(this.table.name)} set state = 'sent', ${sql.raw(this.table.tsColumn)} = ${ts}, sent_at = now(), last_error = null, uncertain = false, lease_expires_at = null
        where ${sql.raw(this.table.key)} = ${row.key} and state = 'posting' and attempts = ${row.attempts}
        returning org_id),
      cleared as (
        update integrations set last_error = null, updated_at = now()
        where org_id in (select org_id from sent) and kind = 'slack' and last_error is not null)
      select 1 from sent`)
    )
    return rows.length === 1
  }

  /**
   * What a claimed row needs before anything is asked of Slack; null when the row was
   * settled instead (nothing to post).
   */
  protected async prepare(_row: Row): Promise<Prepared | null> {
    return undefined as Prepared
  }

  /** The ts of an earlier attempt's post in the thread, or null when none landed. Throws what Slack answered. */
  protected abstract find(token: string, row: Row): Promise<string | null>

  /** Posts the row's message; Slack's ts of it. Throws what Slack answered (SlackCallError). */
  protected abstract send(token: string, row: Row, prepared: Prepared): Promise<string>

  /** After the post was recorded as sent (by this attempt). */
  protected async afterSent(_row: Row, _prepared: Prepared): Promise<void> {}

  /** Posts one claimed row and records what came of it. */
  private async deliver(row: Row): Promise<void> {
    const { o } = this
    const { noun } = this.table
    if (row.attempts > o.maxAttempts) {
      await this.settle(row, sql`state = 'failed', last_error = ${`gave up: the ${noun} was claimed too many times`}`)
      return
    }
    const prepared = await this.prepare(row)
    if (prepared === null) return
    const token = await o.botToken(row.orgId)
    if (token === null) {
      await this.settle(row, sql`state = 'failed', last_error = ${'Slack is not connected for this organization'}`)
      return
    }
    let uncertain = row.uncertain
    let ts: string
    try {
      const found = uncertain ? await this.lookFor(token, row) : undefined
      if (typeof found === 'string') ts = found
      else {
        // null: looked, and no earlier attempt landed
        if (found === null) uncertain = false
        if (this.killed) return
        ts = await this.send(token, row, prepared)
      }
    } catch (err) {
      if (this.killed) return
      if (!(err instanceof SlackCallError)) throw err
      await this.failed(row, err, uncertain || maybeDone(err.failure))
      return
    }
    if (await this.sent(row, ts)) await this.afterSent(row, prepared)
  }

  /** The ts of an earlier attempt's post in the thread; null: none; undefined: could not look (then it posts). */
  private async lookFor(token: string, row: Row): Promise<string | null | undefined> {
    try {
      return await this.find(token, row)
    } catch (err) {
      this.o.log.warn(
        { runId: row.runId, err: (err as Error).message },
        `${this.what}: could not look for an earlier ${this.table.noun} (needs the history scopes); posting`
      )
      return undefined
    }
  }

  private async failed(row: Row, err: SlackCallError, uncertain: boolean): Promise<void> {
    const { o } = this
    const { noun } = this.table
    const { giveUp, delayMs } = await planAfterFailure(o.db, row.orgId, err, row.attempts, o)
    if (giveUp) {
      await this.settle(row, sql`state = 'failed', last_error = ${err.message}, uncertain = ${uncertain}`)
      o.log.warn(
        { runId: row.runId, orgId: row.orgId, attempt: row.attempts, err: err.message },
        `${this.what}: ${noun} given up`
      )
      return
    }
    await this.settle(
      row,
      sql`state = 'pending', last_error = ${err.message}, uncertain = ${uncertain},
      next_attempt_at = now() + make_interval(secs => ${delayMs / 1000})`
    )
    o.log.info(
      { runId: row.runId, attempt: row.attempts, err: err.message, retryInMs: delayMs },
      `${this.what}: ${noun} will be tried again`
    )
  }
}
