import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { EventBus } from '../../plugins/event-bus.js'
import { rowsOf, type Db } from '../db/client.js'
import { boolOf } from '../db/rows.js'
import type { Clock } from '../worker-loop.js'
import { maybeDone, OutboxLoop, planAfterFailure, SWEEP_EVERY_MS } from './outbox-loop.js'
import { pruneDedupe } from './slack-repo.js'
import { SlackCallError, type SlackApi } from './web-api.js'

/** Slack's limit is 40,000 characters; a longer answer is cut, saying so. */
const MAX_TEXT = 39_000
const TERMINAL_EVENTS = new Set(['run.succeeded', 'run.failed', 'run.cancelled'])
const PRUNE_EVERY_MS = 60 * 60 * 1000

/** The text posted for a finished run. */
export function replyText(source: { status: string; error: string | null; text: string | null }): string {
  let text: string
  if (source.status === 'succeeded') text = source.text?.trim() ? source.text : '(the run finished without an answer)'
  else if (source.error?.startsWith('model_unavailable:'))
    text = `Sorry, the model could not be reached, so there is no answer this time. Please try again later. (${source.error.slice('model_unavailable:'.length).trim()})`
  else if (source.status === 'failed') text = `Sorry, the run failed: ${source.error ?? 'unknown error'}`
  else text = 'The run was cancelled.'
  return text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}… (cut: the full answer is in Cairn)` : text
}

export interface SlackOutboxOptions {
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
  /** replies claimed per round, and posted at once */
  batch: number
}

interface Claimed {
  runId: string
  org_id: string
  channel: string
  thread_ts: string
  message_ts: string
  attempts: number
  uncertain: boolean
  /** the run's, for the reply's text */
  status: string
  error: string | null
  text: string | null
}

/**
 * Posts the answer of each finished run started from Slack into its thread, exactly once.
 * A reply row is written with its run (`waiting`) and becomes due when the run ends, however
 * it ends (an answer, a failure, a cancel, the sweeper's worker_lost): the run's terminal
 * event on the bus marks it, and a sweep against the runs' status catches what the bus
 * missed. Due rows are claimed with `FOR UPDATE SKIP LOCKED` under a lease, so any number
 * of instances share the outbox and a reply whose instance died is taken over when its
 * lease expires; a claim reads only due rows, however many runs are still going.
 *
 * Exactly one reply: success is recorded in one conditional statement with Slack's ts;
 * every post carries the run id as message metadata, and an attempt after one whose outcome
 * is unknown (a lost answer, a 5xx, an instance that died mid-post) first looks for that
 * reply in the thread (conversations.replies) and records it instead of posting again.
 */
export class SlackOutbox extends OutboxLoop<Claimed> {
  private readonly o: SlackOutboxOptions
  /** runs the bus said ended since the last look */
  private readonly ended = new Set<string>()

  constructor(options: SlackOutboxOptions) {
    super({ log: options.log, clock: options.clock, pollMs: options.pollMs, what: 'slack outbox' })
    this.o = options
  }

  start(): void {
    this.begin(
      [
        this.o.bus.subscribeAll((event) => {
          if (!TERMINAL_EVENTS.has(event.type)) return
          this.ended.add(event.runId)
          this.wakeSoon()
        }),
        // notifications were lost while the bus reconnected: look at every waiting reply
        this.o.bus.onResync(() => void this.sweep())
      ],
      [
        [SWEEP_EVERY_MS, () => this.sweep()],
        [PRUNE_EVERY_MS, () => this.prune()]
      ]
    )
    // runs that ended while no outbox ran
    void this.sweep().then(() => this.wake())
  }

  /**
   * The replies of runs whose end the bus announced become due: one statement for all the
   * runs that ended since the last look (most of them are not Slack's, and match nothing).
   */
  protected async beforeRound(): Promise<number | null> {
    if (this.ended.size === 0) return null
    const ids = [...this.ended]
    this.ended.clear()
    try {
      return rowsOf(
        await this.o.db.execute(sql`
        update slack_replies set state = 'pending', next_attempt_at = now()
        where state = 'waiting' and run_id in (${sql.join(
          ids.map((id) => sql`${id}`),
          sql`, `
        )})
        returning run_id`)
      ).length
    } catch (err) {
      // the sweep finds them
      if (!this.stopped) this.o.log.warn({ err }, 'slack outbox: marking replies due failed')
      return null
    }
  }

  /**
   * Every waiting reply whose run has ended becomes due, whatever the bus said: at start
   * (runs that ended while no outbox ran), after the bus reconnected, and now and then.
   */
  async sweep(): Promise<number> {
    try {
      const rows = rowsOf(
        await this.o.db.execute(sql`
        update slack_replies s set state = 'pending', next_attempt_at = now()
        from runs r
        where s.state = 'waiting' and r.id = s.run_id and r.status in ('succeeded', 'failed', 'cancelled')
        returning s.run_id`)
      )
      if (rows.length > 0) this.wake()
      return rows.length
    } catch (err) {
      if (!this.stopped) this.o.log.warn({ err }, 'slack outbox: sweeping waiting replies failed')
      return 0
    }
  }

  /**
   * One statement: claims due replies under a lease and reads what each will say (its run's
   * status, error and last completed message).
   */
  protected async claim(): Promise<Claimed[]> {
    const { o } = this
    const rows = rowsOf<Omit<Claimed, 'runId'> & { run_id: string }>(
      await o.db.execute(sql`
      with claimed as (
        update slack_replies o
        set state = 'posting', attempts = o.attempts + 1, uncertain = (o.uncertain or o.state = 'posting'),
            lease_expires_at = now() + make_interval(secs => ${o.leaseMs / 1000})
        where o.run_id in (
          select s.run_id from slack_replies s
          where (s.state = 'pending' and s.next_attempt_at <= now()) or (s.state = 'posting' and s.lease_expires_at < now())
          order by s.next_attempt_at
          limit ${o.batch}
          for update skip locked)
        returning o.run_id, o.org_id, o.channel, o.thread_ts, o.message_ts, o.attempts, o.uncertain)
      select c.*, r.status, r.error,
        (select e.data->>'text' from run_events e where e.run_id = c.run_id and e.type = 'message.completed' order by e.id desc limit 1) as text
      from claimed c join runs r on r.id = c.run_id`)
    )
    return rows.map(({ run_id: runId, ...r }) => ({
      ...r,
      runId,
      attempts: Number(r.attempts),
      uncertain: boolOf(r.uncertain)
    }))
  }

  /** A conditional move of a claimed row: nothing when it moved on (another instance took it over). */
  private async settle(row: Claimed, set: SQL): Promise<boolean> {
    if (this.killed) return false
    const result = await this.o.db.execute(sql`
      update slack_replies set ${set}, lease_expires_at = null
      where run_id = ${row.runId} and state = 'posting' and attempts = ${row.attempts}
      returning run_id`)
    return rowsOf(result).length === 1
  }

  /**
   * Records the reply as sent, and clears a token failure the integration showed (the token works again), in one
   * statement.
   */
  private async sent(row: Claimed, ts: string): Promise<void> {
    if (this.killed) return
    await this.o.db.execute(sql`
      with sent as (
        update slack_replies set state = 'sent', reply_ts = ${ts}, sent_at = now(), last_error = null, uncertain = false, lease_expires_at = null
        where run_id = ${row.runId} and state = 'posting' and attempts = ${row.attempts}
        returning org_id)
      update integrations set last_error = null, updated_at = now()
      where org_id in (select org_id from sent) and kind = 'slack' and last_error is not null`)
  }

  protected async deliver(row: Claimed): Promise<void> {
    const { o } = this
    if (row.attempts > o.maxAttempts) {
      await this.settle(row, sql`state = 'failed', last_error = ${'gave up: the reply was claimed too many times'}`)
      return
    }
    const token = await o.botToken(row.org_id)
    if (token === null) {
      await this.settle(row, sql`state = 'failed', last_error = ${'Slack is not connected for this organization'}`)
      return
    }
    let uncertain = row.uncertain
    try {
      if (uncertain) {
        const found = await this.lookFor(token, row)
        if (found !== undefined) {
          if (found !== null) return await this.sent(row, found)
          // looked, and no earlier attempt landed
          uncertain = false
        }
      }
      if (this.killed) return
      const ts = await o.api.postReply(token, {
        channel: row.channel,
        threadTs: row.thread_ts,
        text: replyText(row),
        runId: row.runId
      })
      await this.sent(row, ts)
    } catch (err) {
      if (this.killed) return
      if (!(err instanceof SlackCallError)) throw err
      await this.failed(row, err, uncertain || maybeDone(err.failure))
    }
  }

  /** The ts of an earlier attempt's reply in the thread; null: none; undefined: could not look (then it posts). */
  private async lookFor(token: string, row: Claimed): Promise<string | null | undefined> {
    try {
      return await this.o.api.findReply(token, {
        channel: row.channel,
        threadTs: row.thread_ts,
        after: row.message_ts,
        runId: row.runId
      })
    } catch (err) {
      this.o.log.warn(
        { runId: row.runId, err: (err as Error).message },
        'slack outbox: could not look for an earlier reply (needs the history scopes); posting'
      )
      return undefined
    }
  }

  private async failed(row: Claimed, err: SlackCallError, uncertain: boolean): Promise<void> {
    const { o } = this
    const { giveUp, delayMs: delay } = await planAfterFailure(o.db, row.org_id, err, row.attempts, o)
    if (giveUp) {
      await this.settle(row, sql`state = 'failed', last_error = ${err.message}, uncertain = ${uncertain}`)
      o.log.warn(
        { runId: row.runId, orgId: row.org_id, attempt: row.attempts, err: err.message },
        'slack outbox: reply given up'
      )
      return
    }
    await this.settle(
      row,
      sql`state = 'pending', last_error = ${err.message}, uncertain = ${uncertain},
      next_attempt_at = now() + make_interval(secs => ${delay / 1000})`
    )
    o.log.info(
      { runId: row.runId, attempt: row.attempts, err: err.message, retryInMs: delay },
      'slack outbox: reply will be tried again'
    )
  }

  /** Deletes dedupe rows past Slack's retry window; never throws. */
  async prune(): Promise<number> {
    try {
      return await pruneDedupe(this.o.db, 24)
    } catch (err) {
      this.o.log.warn({ err }, 'slack outbox: pruning dedupe rows failed')
      return 0
    }
  }
}
