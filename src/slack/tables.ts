import { sql } from 'drizzle-orm'
import {
  bigint,
  boolean,
  check,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  uniqueIndex
} from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'
import { sqlList } from '../db/sql-list.js'
import { runs } from '../runs/tables.js'

/**
 * Which org a Slack workspace belongs to: the ingress finds the org (and so the signing
 * secret) by the event's `team_id`. A team is connected to one org at a time (primary
 * key), an org to one team (unique). The bot's ids tell the bot's own messages apart.
 */
export const slackTeams = pgTable(
  'slack_teams',
  {
    teamId: text('team_id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    botUserId: text('bot_user_id'),
    botId: text('bot_id'),
    connectedAt: ts('connected_at').notNull().defaultNow()
  },
  (t) => [uniqueIndex('slack_teams_org_idx').on(t.orgId)]
)

/**
 * One Slack thread is one Cairn thread: `(team, channel, thread_ts)` (a message's own `ts`
 * when it starts the thread) to the root run of the Cairn thread.
 */
export const slackThreads = pgTable(
  'slack_threads',
  {
    teamId: text('team_id').notNull(),
    channel: text('channel').notNull(),
    threadTs: text('thread_ts').notNull(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    rootRunId: text('root_run_id').notNull(),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [primaryKey({ columns: [t.teamId, t.channel, t.threadTs] })]
)

/**
 * The messages that started a run, one row per Slack message: the `message` and
 * `app_mention` events of one message (two event ids) meet on this key, in either order and
 * on any instance, and only the first starts a run. Kept a day (Slack retries for an hour).
 */
export const slackMessages = pgTable(
  'slack_messages',
  {
    teamId: text('team_id').notNull(),
    channel: text('channel').notNull(),
    ts: text('ts').notNull(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    runId: text('run_id').notNull(),
    eventId: text('event_id').notNull(),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [primaryKey({ columns: [t.teamId, t.channel, t.ts] }), index('slack_messages_created_idx').on(t.createdAt)]
)

/** Every event callback taken, by Slack's `event_id`: a retry (X-Slack-Retry-Num) does nothing again. Kept a day. */
export const slackEvents = pgTable(
  'slack_events',
  {
    teamId: text('team_id').notNull(),
    eventId: text('event_id').notNull(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    receivedAt: ts('received_at').notNull().defaultNow()
  },
  (t) => [primaryKey({ columns: [t.teamId, t.eventId] }), index('slack_events_received_idx').on(t.receivedAt)]
)

/**
 * waiting: its run has not ended; pending: due at `next_attempt_at`; posting: claimed under a
 * lease; sent; failed: given up.
 */
export const SLACK_REPLY_STATES = ['waiting', 'pending', 'posting', 'sent', 'failed'] as const
export type SlackReplyState = (typeof SLACK_REPLY_STATES)[number]

/**
 * The reply outbox: one row per run started from Slack, written with the run (`waiting`). It
 * becomes `pending` (due) when its run ends; the worker claims it under a lease (`FOR UPDATE SKIP LOCKED`),
 * posts the answer in the thread and records `sent` with Slack's `message_ts`. Keyed by the
 * run, so a run has one reply. `uncertain`: an earlier attempt may have posted (a lost
 * answer, a 5xx, an instance that died mid-post), so the next one looks in the thread for
 * it before posting again.
 */
export const slackReplies = pgTable(
  'slack_replies',
  {
    runId: text('run_id')
      .primaryKey()
      .references(() => runs.id, { onDelete: 'cascade' }),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    teamId: text('team_id').notNull(),
    channel: text('channel').notNull(),
    threadTs: text('thread_ts').notNull(),
    /** the message the run answers (replies are looked for after it) */
    messageTs: text('message_ts').notNull(),
    state: text('state').$type<SlackReplyState>().notNull().default('waiting'),
    attempts: integer('attempts').notNull().default(0),
    uncertain: boolean('uncertain').notNull().default(false),
    nextAttemptAt: ts('next_attempt_at').notNull().defaultNow(),
    leaseExpiresAt: ts('lease_expires_at'),
    lastError: text('last_error'),
    /** Slack's ts of the posted reply */
    replyTs: text('reply_ts'),
    createdAt: ts('created_at').notNull().defaultNow(),
    sentAt: ts('sent_at')
  },
  (t) => [
    index('slack_replies_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`state in ('pending', 'posting')`),
    index('slack_replies_waiting_idx')
      .on(t.createdAt)
      .where(sql`state = 'waiting'`),
    check('slack_replies_state_check', sql`${t.state} in (${sqlList(SLACK_REPLY_STATES)})`)
  ]
)

/**
 * pending: due at `next_attempt_at`; posting: claimed under a lease; sent; failed: given up;
 * skipped: none of its approvals was still waiting when it was due (nothing to ask).
 */
export const SLACK_APPROVAL_MESSAGE_STATES = ['pending', 'posting', 'sent', 'failed', 'skipped'] as const
export type SlackApprovalMessageState = (typeof SLACK_APPROVAL_MESSAGE_STATES)[number]

/**
 * The approval-request outbox: one row per time a Slack-started run stopped for people's
 * decisions, keyed by that `run.requires_action` event (so a run that stops again later
 * gets another message, and the same stop never two). Written when the event is heard on
 * the bus, or by the sweep for a waiting run whose stop has no row; the worker claims it
 * under a lease (`FOR UPDATE SKIP LOCKED`), posts one message with Approve and Deny
 * buttons in the run's Slack thread and records Slack's `message_ts`, which a decision
 * later updates. `approval_ids` are the stop's pending approvals; a click is acted on
 * only for an approval listed in a message posted for that team. `uncertain`: an earlier
 * attempt may have posted, so the next one looks in the thread before posting again.
 */
export const slackApprovalMessages = pgTable(
  'slack_approval_messages',
  {
    eventId: bigint('event_id', { mode: 'number' }).primaryKey(),
    runId: text('run_id')
      .notNull()
      .references(() => runs.id, { onDelete: 'cascade' }),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    teamId: text('team_id').notNull(),
    channel: text('channel').notNull(),
    threadTs: text('thread_ts').notNull(),
    /** the message that started the run: an earlier attempt's post is looked for after it */
    afterTs: text('after_ts').notNull(),
    approvalIds: jsonb('approval_ids').$type<string[]>().notNull(),
    state: text('state').$type<SlackApprovalMessageState>().notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    uncertain: boolean('uncertain').notNull().default(false),
    nextAttemptAt: ts('next_attempt_at').notNull().defaultNow(),
    leaseExpiresAt: ts('lease_expires_at'),
    lastError: text('last_error'),
    /** Slack's ts of the posted message (chat.update names it) */
    messageTs: text('message_ts'),
    createdAt: ts('created_at').notNull().defaultNow(),
    sentAt: ts('sent_at')
  },
  (t) => [
    index('slack_approval_messages_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`state in ('pending', 'posting')`),
    index('slack_approval_messages_run_idx').on(t.runId),
    check('slack_approval_messages_state_check', sql`${t.state} in (${sqlList(SLACK_APPROVAL_MESSAGE_STATES)})`)
  ]
)
