import { sql, type SQL } from 'drizzle-orm'
import { rowsOf } from '../db/client.js'
import { boolOf } from '../db/rows.js'
import { PostOutbox, SWEEP_EVERY_MS, type ClaimedPost, type PostOutboxOptions } from './outbox-loop.js'
import { pruneDedupe } from './slack-repo.js'

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

interface Claimed extends ClaimedPost {
  key: string
  channel: string
  threadTs: string
  /** the message the run answers (an earlier attempt's reply is looked for after it) */
  messageTs: string
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
 * missed. A claim reads only due rows, however many runs are still going; claims, leases,
 * retries and exactly-once posting are every Slack outbox's (`PostOutbox`, outbox-loop.ts):
 * a reply carries its run id as message metadata, and an attempt after one whose outcome is
 * unknown looks for that reply in the thread (conversations.replies) before posting again.
 */
export class SlackOutbox extends PostOutbox<Claimed> {
  /** runs the bus said ended since the last look */
  private readonly ended = new Set<string>()

  constructor(options: PostOutboxOptions) {
    super(options, 'slack outbox', {
      name: 'slack_replies',
      key: 'run_id',
      tsColumn: 'reply_ts',
      returning: ['run_id', 'org_id', 'channel', 'thread_ts', 'message_ts', 'attempts', 'uncertain'],
      noun: 'reply'
    })
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
   * The ids go as one JSON array: one prepared statement whatever their number, where a list of
   * parameters made a new one for each length.
   */
  protected async beforeRound(): Promise<number | null> {
    if (this.ended.size === 0) return null
    const ids = [...this.ended]
    this.ended.clear()
    try {
      return rowsOf(
        await this.o.db.execute(sql`
        update slack_replies set state = 'pending', next_attempt_at = now()
        where state = 'waiting' and run_id = any(array(select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb)))
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

  /** The claim reads, with each reply, what it will say: its run's status, error and last completed message. */
  protected override claimStatement(claimed: SQL): SQL {
    return sql`
      with claimed as (${claimed})
      select c.*, r.status, r.error,
        (select e.data->>'text' from run_events e where e.run_id = c.run_id and e.type = 'message.completed' order by e.id desc limit 1) as text
      from claimed c join runs r on r.id = c.run_id`
  }

  protected rowOf(r: Record<string, unknown>): Claimed {
    return {
      key: r.run_id as string,
      runId: r.run_id as string,
      orgId: r.org_id as string,
      channel: r.channel as string,
      threadTs: r.thread_ts as string,
      messageTs: r.message_ts as string,
      attempts: Number(r.attempts),
      uncertain: boolOf(r.uncertain),
      status: r.status as string,
      error: (r.error as string | null) ?? null,
      text: (r.text as string | null) ?? null
    }
  }

  protected find(token: string, row: Claimed): Promise<string | null> {
    return this.o.api.findReply(token, {
      channel: row.channel,
      threadTs: row.threadTs,
      after: row.messageTs,
      runId: row.runId
    })
  }

  protected send(token: string, row: Claimed): Promise<string> {
    return this.o.api.postReply(token, {
      channel: row.channel,
      threadTs: row.threadTs,
      text: replyText(row),
      runId: row.runId
    })
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
