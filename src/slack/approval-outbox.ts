import { sql, type SQL } from 'drizzle-orm'
import { rowsOf } from '../db/client.js'
import { boolOf, dateOf, jsonOf } from '../db/rows.js'
import { approvalMessage, isWaiting, type ShownApproval } from './approval-message.js'
import { PostOutbox, SWEEP_EVERY_MS, type ClaimedPost, type PostOutboxOptions } from './outbox-loop.js'

/** The run event a run stores when it stops for people's decisions; its data is `{approvalIds}`. */
export const REQUIRES_ACTION_EVENT = 'run.requires_action'

interface Claimed extends ClaimedPost {
  key: number
  eventId: number
  channel: string
  threadTs: string
  afterTs: string
  approvalIds: string[]
}

/** What a claimed message shows: its approvals as they are now, and which of them still wait. */
interface Shown {
  approvals: ShownApproval[]
  waiting: Set<string>
  now: Date
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
 * that key. Rows are claimed and posted as every Slack outbox's are (`PostOutbox`,
 * outbox-loop.ts): `FOR UPDATE SKIP LOCKED` under a lease, success recorded in one
 * conditional statement with Slack's ts, backoff on failures and Retry-After on 429, and an
 * attempt after one whose outcome is unknown first looks for the message in the thread by
 * its metadata. A stop whose approvals
 * were all decided (or expired) before its turn posts nothing (`skipped`).
 */
export class ApprovalOutbox extends PostOutbox<Claimed, Shown> {
  /** run.requires_action event ids the bus brought since the last look */
  private readonly requested = new Set<number>()

  constructor(options: PostOutboxOptions) {
    super(options, 'slack approval requests', {
      name: 'slack_approval_messages',
      key: 'event_id',
      tsColumn: 'message_ts',
      returning: [
        'event_id',
        'run_id',
        'org_id',
        'channel',
        'thread_ts',
        'after_ts',
        'approval_ids',
        'attempts',
        'uncertain'
      ],
      noun: 'message'
    })
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

  protected rowOf(r: Record<string, unknown>): Claimed {
    const eventId = Number(r.event_id)
    return {
      key: eventId,
      eventId,
      runId: r.run_id as string,
      orgId: r.org_id as string,
      channel: r.channel as string,
      threadTs: r.thread_ts as string,
      afterTs: r.after_ts as string,
      approvalIds: jsonOf<unknown[]>(r.approval_ids).filter((id): id is string => typeof id === 'string'),
      attempts: Number(r.attempts),
      uncertain: boolOf(r.uncertain)
    }
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

  /** The approvals as they are now: a message none of whose approvals still waits is skipped (nothing to ask). */
  protected override async prepare(row: Claimed): Promise<Shown | null> {
    const approvals = await this.approvalsOf(row)
    const now = this.o.clock.now()
    const waiting = new Set(approvals.filter((a) => isWaiting(a, now)).map((a) => a.id))
    if (waiting.size === 0) {
      // decided, expired or cancelled before its turn: nothing to ask
      await this.settle(row, sql`state = 'skipped'`)
      return null
    }
    return { approvals, waiting, now }
  }

  protected find(token: string, row: Claimed): Promise<string | null> {
    return this.o.api.findApprovalRequest(token, {
      channel: row.channel,
      threadTs: row.threadTs,
      after: row.afterTs,
      requestId: String(row.eventId)
    })
  }

  protected send(token: string, row: Claimed, shown: Shown): Promise<string> {
    return this.o.api.postApprovalRequest(token, {
      channel: row.channel,
      threadTs: row.threadTs,
      runId: row.runId,
      requestId: String(row.eventId),
      ...approvalMessage(row.runId, shown.approvals, shown.now)
    })
  }

  /**
   * A decision made while it was being posted (a click before its ts was recorded, or in
   * Cairn): the message is brought up to date.
   */
  protected override async afterSent(row: Claimed, shown: Shown): Promise<void> {
    const later = this.o.clock.now()
    if ((await this.approvalsOf(row)).some((a) => shown.waiting.has(a.id) && !isWaiting(a, later)))
      await this.refreshQuietly(row.orgId, row.eventId)
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
