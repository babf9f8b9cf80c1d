import { sql } from 'drizzle-orm'
import { rowsOf, type Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import type { ChatPlatformRun, ChatPlatformRuns } from '../runs/ports/chat-platforms.js'
import {
  claimMessage,
  dropConnection,
  firstDelivery,
  restartThread,
  stillConnected,
  threadFor,
  type SlackTeamRow
} from './slack-repo.js'
import { slackReplies } from './tables.js'

/** The fields of a Slack event this service reads (Events API, `event_callback`). */
export interface SlackEvent {
  type: string
  user?: string | undefined
  bot_id?: string | undefined
  subtype?: string | undefined
  text?: string | undefined
  ts?: string | undefined
  thread_ts?: string | undefined
  channel?: string | undefined
  channel_type?: string | undefined
}

export interface SlackEnvelope {
  type: string
  team_id?: string | undefined
  event_id?: string | undefined
  event?: SlackEvent | undefined
}

/** What an event asks for. */
export type Decision =
  | { kind: 'run'; channel: string; ts: string; threadTs: string; prompt: string; user: string | null }
  | { kind: 'disconnect' }
  | { kind: 'ignore'; reason: string }

/** Message subtypes that are still a person writing (a reply also sent to the channel, a message with a file). */
const PERSON_SUBTYPES = new Set(['thread_broadcast', 'file_share'])

/** `<@U123>` or `<@U123|name>`: a mention of that user in Slack's message markup. */
const mentionOf = (userId: string) => new RegExp(`<@${userId.replace(/[^A-Za-z0-9_-]/g, '')}(\\|[^>]*)?>`, 'g')

/**
 * A message's text as a person wrote it: Slack's three escapes undone, line breaks and
 * indentation kept (code blocks, lists and tracebacks mean nothing flattened to one line).
 */
export function plainText(text: string): string {
  return text
    .replace(/\r\n?/g, '\n')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&')
    .replace(/^\s*\n/, '')
    .replace(/^[ \t]+/, '')
    .trimEnd()
}

/** Whether a message mentions the bot. */
export const mentionsBot = (text: string, botUserId: string | null) =>
  botUserId !== null && new RegExp(mentionOf(botUserId).source).test(text)

/** The prompt a message makes: the bot's mention taken out (with the spaces after it), as `plainText`. */
export function promptOf(text: string, botUserId: string | null): string {
  const without = botUserId ? text.replace(new RegExp(`${mentionOf(botUserId).source}[ \\t]*`, 'g'), '') : text
  const prompt = plainText(without)
  return prompt.trim() === '' ? '(an empty message)' : prompt
}

/**
 * What to do with one event. An `app_mention` starts a run; so does a `message` that
 * mentions the bot (the same Slack message, deduplicated by its ts, so whichever of the two
 * events comes first starts the one run) or is sent to the bot directly (a DM). Messages
 * from bots never start runs: the bot's own replies (its user or bot id) would loop, and
 * another bot answering it would loop through it. Uninstalling the app or revoking its
 * tokens disconnects the org.
 */
export function decide(team: Pick<SlackTeamRow, 'botUserId' | 'botId'>, event: SlackEvent | undefined): Decision {
  if (!event) return { kind: 'ignore', reason: 'no event' }
  if (event.type === 'app_uninstalled' || event.type === 'tokens_revoked') return { kind: 'disconnect' }
  if (event.type !== 'app_mention' && event.type !== 'message')
    return { kind: 'ignore', reason: `event type ${event.type}` }
  if (
    event.bot_id !== undefined ||
    event.subtype === 'bot_message' ||
    (team.botUserId !== null && event.user === team.botUserId)
  ) {
    return { kind: 'ignore', reason: 'a bot wrote it' }
  }
  if (event.subtype !== undefined && !PERSON_SUBTYPES.has(event.subtype))
    return { kind: 'ignore', reason: `message subtype ${event.subtype}` }
  const { channel, ts } = event
  if (typeof channel !== 'string' || channel === '' || typeof ts !== 'string' || ts === '')
    return { kind: 'ignore', reason: 'no channel or ts' }
  const text = event.text ?? ''
  if (event.type === 'message') {
    const mentioned = team.botUserId !== null && mentionOf(team.botUserId).test(text)
    if (!mentioned && event.channel_type !== 'im') return { kind: 'ignore', reason: 'not addressed to the bot' }
  }
  return {
    kind: 'run',
    channel,
    ts,
    threadTs: event.thread_ts || ts,
    prompt: promptOf(text, team.botUserId),
    user: event.user ?? null
  }
}

export type Received =
  | { kind: 'started'; runId: string; rootRunId: string }
  | { kind: 'duplicate' }
  | { kind: 'disconnected' }
  | { kind: 'ignored'; reason: string }

type RunDecision = Extract<Decision, { kind: 'run' }>

/**
 * Takes one verified event callback. What it stores (the event id, the message, the
 * thread, the run and its reply row) commits together, so a retry, the other event of the
 * same message, or the same event on another instance finds the rows of the first and
 * starts nothing; and nothing is stored for a team that is no longer connected. The run is
 * announced after the commit; nothing here waits for it to run.
 */
export async function receiveEvent(
  deps: { db: Db; runs: ChatPlatformRuns },
  team: SlackTeamRow,
  envelope: SlackEnvelope
): Promise<Received> {
  const decision = decide(team, envelope.event)
  const eventId = envelope.event_id ?? null
  if (decision.kind === 'ignore') {
    // nothing to remember: acting on it again does nothing either
    return { kind: 'ignored', reason: decision.reason }
  }
  if (decision.kind === 'disconnect') {
    await deps.db.transaction(async (tx) => {
      if (eventId !== null) await firstDelivery(tx, team.orgId, team.teamId, eventId)
      await dropConnection(tx, team.orgId)
    })
    return { kind: 'disconnected' }
  }
  // outside any transaction: the choice may ask the model provider whether it is up
  const chosen = await deps.runs.engine(team.orgId)
  const run: ChatPlatformRun = {
    id: newId(),
    orgId: team.orgId,
    prompt: decision.prompt,
    engine: chosen.engine,
    model: chosen.model,
    metadata: {
      slack: {
        teamId: team.teamId,
        channel: decision.channel,
        ts: decision.ts,
        threadTs: decision.threadTs,
        user: decision.user,
        eventId
      }
    }
  }
  const rootRunId =
    decision.threadTs === decision.ts
      ? await startThread(deps, team, decision, eventId, run)
      : await continueThread(deps, team, decision, eventId, run)
  if (rootRunId === null) return { kind: 'duplicate' }
  await deps.runs.announce([{ id: run.id, orgId: run.orgId, rootRunId, engine: run.engine, model: run.model }])
  return { kind: 'started', runId: run.id, rootRunId }
}

/**
 * A message that starts a Slack thread (the common case): everything in ONE statement, each
 * step gated on the one before (the team still connected, the event id new, the message
 * new), so it costs one round trip. The message's own ts keys the thread; the run is its root.
 * Returns the root run id, or null when a step found its row taken (a duplicate).
 */
async function startThread(
  deps: { db: Db; runs: ChatPlatformRuns },
  team: SlackTeamRow,
  d: RunDecision,
  eventId: string | null,
  run: ChatPlatformRun
): Promise<string | null> {
  const { teamId, orgId } = team
  const event =
    eventId === null
      ? sql`ev as (select 1 from live)`
      : sql`ev as (insert into slack_events (team_id, event_id, org_id) select ${teamId}, ${eventId}, ${orgId} from live on conflict do nothing returning 1)`
  const rows = rowsOf<{ started: number }>(
    await deps.db.execute(sql`
    with live as (select 1 from slack_teams where team_id = ${teamId} and org_id = ${orgId}),
    ${event},
    msg as (
      insert into slack_messages (team_id, channel, ts, org_id, run_id, event_id)
      select ${teamId}, ${d.channel}, ${d.ts}, ${orgId}, ${run.id}, ${eventId ?? ''} from ev
      on conflict do nothing returning 1),
    thr as (
      insert into slack_threads (team_id, channel, thread_ts, org_id, root_run_id)
      select ${teamId}, ${d.channel}, ${d.ts}, ${orgId}, ${run.id} from msg
      on conflict (team_id, channel, thread_ts) do update set org_id = excluded.org_id, root_run_id = excluded.root_run_id, created_at = now()
      returning 1),
    run as (${deps.runs.rootInsert(run, sql`thr`)}),
    reply as (
      insert into slack_replies (run_id, org_id, team_id, channel, thread_ts, message_ts)
      select ${run.id}, ${orgId}, ${teamId}, ${d.channel}, ${d.ts}, ${d.ts} from run
      returning 1)
    select count(*)::int as started from reply`)
  )
  return Number(rows[0]?.started ?? 0) === 1 ? run.id : null
}

/** A mention inside a Slack thread: the next run of the Cairn thread it maps to (or a new one), in one transaction. */
async function continueThread(
  deps: { db: Db; runs: ChatPlatformRuns },
  team: SlackTeamRow,
  d: RunDecision,
  eventId: string | null,
  run: ChatPlatformRun
): Promise<string | null> {
  return deps.db.transaction(async (tx) => {
    if (!(await stillConnected(tx, team))) return null
    if (eventId !== null && !(await firstDelivery(tx, team.orgId, team.teamId, eventId))) return null
    const where = { orgId: team.orgId, teamId: team.teamId, channel: d.channel }
    if (!(await claimMessage(tx, { ...where, ts: d.ts, runId: run.id, eventId: eventId ?? '' }))) return null
    const thread = { ...where, threadTs: d.threadTs, runId: run.id }
    const { rootRunId } = await threadFor(tx, thread)
    let created = await deps.runs.insert(tx, { ...run, rootRunId })
    if (!created) {
      // the thread's root is not this org's (any more): the Slack thread starts a new Cairn thread
      await restartThread(tx, thread)
      created = await deps.runs.insert(tx, { ...run, rootRunId: null })
    }
    await tx.insert(slackReplies).values({
      runId: run.id,
      orgId: team.orgId,
      teamId: team.teamId,
      channel: d.channel,
      threadTs: d.threadTs,
      messageTs: d.ts
    })
    return created?.rootRunId ?? null
  })
}
