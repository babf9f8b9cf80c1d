import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { EventBus } from '../../plugins/event-bus.js'
import { rowsOf, type Db } from '../db/client.js'
import { boolOf, dateOf, jsonOf } from '../db/rows.js'
import type { Clock } from '../worker-loop.js'
import { approvalMessage, isWaiting, type ShownApproval } from './approval-message.js'
import { maybeDone, OutboxLoop, planAfterFailure, SWEEP_EVERY_MS } from './outbox-loop.js'
import { SlackCallError, type SlackApi } from './web-api.js'

/** The run event a run stores when it stops for people's decisions; its data is `{approvalIds}`. */
export const REQUIRES_ACTION_EVENT = 'run.requires_action'

export interface ApprovalOutboxOptions {
  db: Db
  api: SlackApi
  bus: EventBus
  log: FastifyBaseLogger
  /** the org's bot token, or null when it has none (disconnected) */
  botToken(orgId: string): Promise<string | null>
  /** the time approvals are shown against (expired or still waiting), and of its claims */
  clock: Clock
  pollMs: number
  leaseMs: number
  retryBaseMs: number
  maxAttempts: number
  /** messages claimed per round, and posted at once */
  batch: number
}

interface Claimed {
  eventId: number
  runId: string
  orgId: string
  channel: string
  threadTs: string
  afterTs: string
  approvalIds: string[]
  attempts: number
  uncertain: boolean
}

/**
 * The row of every `run.requires_action` event matched by `where` (over `run_events e`)
 * whose run was started from Slack: the thread comes from the run's reply row, the
 * approvals from the event (or, should it name none, the run's pending ones).
 */
function recordRequests(where: SQL): SQL {
  return sql`
    insert into slack_approval_messages (event_id, run_id, org_id, team_id, channel, thread_ts, after_ts, approval_ids)
    select e.id, e.run_id, e.org_id, s.team_id, s.channel, s.thread_ts, s.message_ts,
      case when jsonb_typeof(e.data->'approvalIds') = 'array' then e.data->'approvalIds'
        else coalesce((select jsonb_agg(a.id order by a.id) from tool_approvals a
          where a.org_id = e.org_id and a.run_id = e.run_id and a.status = 'pending'), '[]'::jsonb) end
    from run_events e
    join slack_replies s on s.run_id = e.run_id and s.org_id = e.org_id
    where e.type = ${REQUIRES_ACTION_EVENT} and ${where}
    on conflict (event_id) do nothing
    returning event_id`
}

/**
 * Asks in Slack for the decisions a Slack-started run waits for: one message per stop
 * (`run.requires_action`), in the run's thread, naming each pending tool call and its
 * arguments with Approve and Deny buttons; exactly once, on any number of instances.
 *
 * A stop becomes a `slack_approval_messages` row keyed by its event id: when the event is
 * heard on the bus, and by a sweep over waiting runs (at start, after the bus reconnected,
 * every 30 s) for a stop the bus did not bring. Two instances writing the same row meet on
 * that key. Rows are claimed and posted like replies (src/slack/outbox.ts): `FOR UPDATE
 * SKIP LOCKED` under a lease, success recorded in one conditional statement with Slack's
 * ts, backoff on failures and Retry-After on 429, and an attempt after one whose outcome is
 * unknown first looks for the message in the thread by its metadata. A stop whose approvals
 * were all decided (or expired) before its turn posts nothing (`skipped`).
 */
export class ApprovalOutbox extends OutboxLoop<Claimed> {
  private readonly o: ApprovalOutboxOptions
  /** run.requires_action event ids the bus brought since the last look */
  private readonly requested = new Set<number>()

  constructor(options: ApprovalOutboxOptions) {
    super({ log: options.log, clock: options.clock, pollMs: options.pollMs, what: 'slack approval requests' })
    this.o = options
  }

  start(): void {
    this.begin(
      [
        this.o.bus.subscribeAll((event) => {
          if (event.type !== REQUIRES_ACTION_EVENT) return
          this.requested.add(event.id)
          this.wakeSoon()
        }),
        this.o.bus.onResync(() => void this.sweep())
      ],
      [[SWEEP_EVERY_MS, () => this.sweep()]]
    )
    // runs that stopped while no outbox ran
    void this.sweep().then(() => this.wake())
  }

  /**
   * The stops the bus announced become rows: one statement for all of them (most are not Slack runs', and match
   * nothing).
   */
  protected async beforeRound(): Promise<number | null> {
    if (this.requested.size === 0) return null
    const ids = [...this.requested]
    this.requested.clear()
    try {
      return rowsOf(
        await this.o.db.execute(
          recordRequests(
            sql`e.id in (${sql.join(
              ids.map((id) => sql`${id}`),
              sql`, `
            )})`
          )
        )
      ).length
    } catch (err) {
      // the sweep finds them
      if (!this.stopped) this.o.log.warn({ err }, 'slack approval requests: recording requests failed')
      return null
    }
  }

  /**
   * Every Slack-started run waiting for decisions whose latest stop has no row gets one,
   * whatever the bus said; how many rows it wrote.
   */
  async sweep(): Promise<number> {
    try {
      const rows = rowsOf(
        await this.o.db.execute(
          recordRequests(sql`e.id in (
        select (select l.id from run_events l where l.run_id = r.id and l.type = ${REQUIRES_ACTION_EVENT} order by l.id desc limit 1)
        from runs r join slack_replies s on s.run_id = r.id
        where r.status = 'requires_action')
        and not exists (select 1 from slack_approval_messages m where m.event_id = e.id)`)
        )
      )
      if (rows.length > 0) this.wake()
      return rows.length
    } catch (err) {
      if (!this.stopped) this.o.log.warn({ err }, 'slack approval requests: sweeping waiting runs failed')
      return 0
    }
  }

  protected async claim(): Promise<Claimed[]> {
    const { o } = this
    const rows = rowsOf<Record<string, unknown>>(
      await o.db.execute(sql`
      update slack_approval_messages o
      set state = 'posting', attempts = o.attempts + 1, uncertain = (o.uncertain or o.state = 'posting'),
          lease_expires_at = now() + make_interval(secs => ${o.leaseMs / 1000})
      where o.event_id in (
        select m.event_id from slack_approval_messages m
        where (m.state = 'pending' and m.next_attempt_at <= now()) or (m.state = 'posting' and m.lease_expires_at < now())
        order by m.next_attempt_at
        limit ${o.batch}
        for update skip locked)
      returning o.event_id, o.run_id, o.org_id, o.channel, o.thread_ts, o.after_ts, o.approval_ids, o.attempts, o.uncertain`)
    )
    return rows.map((r) => ({
      eventId: Number(r.event_id),
      runId: r.run_id as string,
      orgId: r.org_id as string,
      channel: r.channel as string,
      threadTs: r.thread_ts as string,
      afterTs: r.after_ts as string,
      approvalIds: jsonOf<unknown[]>(r.approval_ids).filter((id): id is string => typeof id === 'string'),
      attempts: Number(r.attempts),
      uncertain: boolOf(r.uncertain)
    }))
  }

  /** The approvals a message lists, as they are now, oldest first. */
  private async approvalsOf(m: { orgId: string; runId: string; approvalIds: string[] }): Promise<ShownApproval[]> {
    if (m.approvalIds.length === 0) return []
    const rows = rowsOf<Record<string, unknown>>(
      await this.o.db.execute(sql`
      select id, tool, arguments, status, decided_by, expires_at from tool_approvals
      where org_id = ${m.orgId} and run_id = ${m.runId} and id in (${sql.join(
        m.approvalIds.map((id) => sql`${id}`),
        sql`, `
      )})
      order by id`)
    )
    return rows.map((r) => ({
      id: r.id as string,
      tool: r.tool as string,
      arguments: jsonOf<unknown>(r.arguments),
      status: r.status as string,
      decidedBy: (r.decided_by as string | null) ?? null,
      expiresAt: dateOf(r.expires_at)
    }))
  }

  /** A conditional move of a claimed row: nothing when it moved on (another instance took it over). */
  private async settle(row: Claimed, set: SQL): Promise<boolean> {
    if (this.killed) return false
    const result = await this.o.db.execute(sql`
      update slack_approval_messages set ${set}, lease_expires_at = null
      where event_id = ${row.eventId} and state = 'posting' and attempts = ${row.attempts}
      returning event_id`)
    return rowsOf(result).length === 1
  }

  /** Records the message as sent with its ts, and clears a token failure the integration showed, in one statement. */
  private async sent(row: Claimed, ts: string): Promise<boolean> {
    if (this.killed) return false
    const rows = rowsOf(
      await this.o.db.execute(sql`
      with sent as (
        update slack_approval_messages set state = 'sent', message_ts = ${ts}, sent_at = now(), last_error = null, uncertain = false, lease_expires_at = null
        where event_id = ${row.eventId} and state = 'posting' and attempts = ${row.attempts}
        returning org_id),
      cleared as (
        update integrations set last_error = null, updated_at = now()
        where org_id in (select org_id from sent) and kind = 'slack' and last_error is not null)
      select 1 from sent`)
    )
    return rows.length === 1
  }

  protected async deliver(row: Claimed): Promise<void> {
    const { o } = this
    if (row.attempts > o.maxAttempts) {
      await this.settle(row, sql`state = 'failed', last_error = ${'gave up: the message was claimed too many times'}`)
      return
    }
    const approvals = await this.approvalsOf(row)
    const now = o.clock.now()
    const waiting = new Set(approvals.filter((a) => isWaiting(a, now)).map((a) => a.id))
    if (waiting.size === 0) {
      // decided, expired or cancelled before its turn: nothing to ask
      await this.settle(row, sql`state = 'skipped'`)
      return
    }
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
        ts = await o.api.postApprovalRequest(token, {
          channel: row.channel,
          threadTs: row.threadTs,
          runId: row.runId,
          requestId: String(row.eventId),
          ...approvalMessage(row.runId, approvals, now)
        })
      }
    } catch (err) {
      if (this.killed) return
      if (!(err instanceof SlackCallError)) throw err
      await this.failed(row, err, uncertain || maybeDone(err.failure))
      return
    }
    if (!(await this.sent(row, ts))) return
    // a decision made while it was being posted (a click before its ts was recorded, or in
    // Cairn): the message is brought up to date
    const later = o.clock.now()
    if ((await this.approvalsOf(row)).some((a) => waiting.has(a.id) && !isWaiting(a, later)))
      await this.refreshQuietly(row.orgId, row.eventId)
  }

  /** The ts of an earlier attempt's message in the thread; null: none; undefined: could not look (then it posts). */
  private async lookFor(token: string, row: Claimed): Promise<string | null | undefined> {
    try {
      return await this.o.api.findApprovalRequest(token, {
        channel: row.channel,
        threadTs: row.threadTs,
        after: row.afterTs,
        requestId: String(row.eventId)
      })
    } catch (err) {
      this.o.log.warn(
        { runId: row.runId, err: (err as Error).message },
        'slack approval requests: could not look for an earlier message (needs the history scopes); posting'
      )
      return undefined
    }
  }

  private async failed(row: Claimed, err: SlackCallError, uncertain: boolean): Promise<void> {
    const { o } = this
    const { giveUp, delayMs } = await planAfterFailure(o.db, row.orgId, err, row.attempts, o)
    if (giveUp) {
      await this.settle(row, sql`state = 'failed', last_error = ${err.message}, uncertain = ${uncertain}`)
      o.log.warn(
        { runId: row.runId, attempt: row.attempts, err: err.message },
        'slack approval requests: message given up'
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
      'slack approval requests: message will be tried again'
    )
  }

  /**
   * Updates a posted approval message to the approvals' state now (who approved or denied,
   * what expired); false when there is nothing to update (not posted yet, or Slack is not
   * connected). Throws what Slack answered (SlackCallError) or the database did.
   */
  async refresh(orgId: string, eventId: number): Promise<boolean> {
    const [row] = rowsOf<Record<string, unknown>>(
      await this.o.db.execute(sql`
      select run_id, channel, message_ts, approval_ids from slack_approval_messages
      where event_id = ${eventId} and org_id = ${orgId} and state = 'sent' and message_ts is not null`)
    )
    if (!row) return false
    const token = await this.o.botToken(orgId)
    if (token === null) return false
    const runId = row.run_id as string
    const approvalIds = jsonOf<unknown[]>(row.approval_ids).filter((id): id is string => typeof id === 'string')
    const approvals = await this.approvalsOf({ orgId, runId, approvalIds })
    await this.o.api.updateMessage(token, {
      channel: row.channel as string,
      ts: row.message_ts as string,
      ...approvalMessage(runId, approvals, this.o.clock.now())
    })
    return true
  }

  /** refresh, its failures logged (an update is best effort: the decision is what counts). */
  async refreshQuietly(orgId: string, eventId: number): Promise<void> {
    try {
      await this.refresh(orgId, eventId)
    } catch (err) {
      this.o.log.warn(
        { orgId, eventId, err: (err as Error).message },
        'slack approval requests: updating the message failed'
      )
    }
  }
}
