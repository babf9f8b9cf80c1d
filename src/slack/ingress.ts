import type { Db, Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import type { RunRow } from '../runs/runs-repo.js'
import { claimMessage, dropConnection, firstDelivery, restartThread, threadFor, type SlackTeamRow } from './slack-repo.js'
import { slackReplies } from './tables.js'

/** What the Slack ingress needs of the runs group (src/runs/chat-platform-runs.ts). */
export interface ChatPlatformRuns {
  /** the engine and model a chat message's run gets */
  engine(): Promise<{ engine: string; model: string | null }>
  /** a queued run in the caller's transaction: a new thread (`rootRunId: null`), or the next run of one; null when that thread is not the org's */
  insert(tx: Tx, run: { id: string; orgId: string; rootRunId: string | null; prompt: string; engine: string; model: string | null; metadata: Record<string, unknown> }): Promise<RunRow | null>
  /** the run.queued events after the commit; never throws */
  announce(runs: RunRow[]): Promise<void>
}

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

/** The prompt a message makes: the bot's mention taken out, Slack's three escapes undone. */
export function promptOf(text: string, botUserId: string | null): string {
  const without = botUserId ? text.replace(mentionOf(botUserId), ' ') : text
  const prompt = without.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&').replace(/\s+/g, ' ').trim()
  return prompt === '' ? '(an empty message)' : prompt
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
  if (event.type !== 'app_mention' && event.type !== 'message') return { kind: 'ignore', reason: `event type ${event.type}` }
  if (event.bot_id !== undefined || event.subtype === 'bot_message' || (team.botUserId !== null && event.user === team.botUserId)) {
    return { kind: 'ignore', reason: 'a bot wrote it' }
  }
  if (event.subtype !== undefined && !PERSON_SUBTYPES.has(event.subtype)) return { kind: 'ignore', reason: `message subtype ${event.subtype}` }
  const { channel, ts } = event
  if (typeof channel !== 'string' || channel === '' || typeof ts !== 'string' || ts === '') return { kind: 'ignore', reason: 'no channel or ts' }
  const text = event.text ?? ''
  if (event.type === 'message') {
    const mentioned = team.botUserId !== null && mentionOf(team.botUserId).test(text)
    if (!mentioned && event.channel_type !== 'im') return { kind: 'ignore', reason: 'not addressed to the bot' }
  }
  return { kind: 'run', channel, ts, threadTs: event.thread_ts || ts, prompt: promptOf(text, team.botUserId), user: event.user ?? null }
}

export type Received =
  | { kind: 'started'; run: RunRow }
  | { kind: 'duplicate' }
  | { kind: 'disconnected' }
  | { kind: 'ignored'; reason: string }

/**
 * Takes one verified event callback. Everything it does is one short transaction (the
 * event id, the message, the thread, the run and its reply row), so a retry, the other
 * event of the same message, or the same event on another instance finds the rows of the
 * first and starts nothing. The run is announced after the commit; nothing here waits
 * for it to run.
 */
export async function receiveEvent(deps: { db: Db; runs: ChatPlatformRuns }, team: SlackTeamRow, envelope: SlackEnvelope): Promise<Received> {
  const decision = decide(team, envelope.event)
  const eventId = envelope.event_id
  if (decision.kind === 'ignore') {
    // nothing to remember: acting on it again does nothing either
    return { kind: 'ignored', reason: decision.reason }
  }
  if (decision.kind === 'disconnect') {
    await deps.db.transaction(async (tx) => {
      if (eventId !== undefined) await firstDelivery(tx, team.orgId, team.teamId, eventId)
      await dropConnection(tx, team.orgId)
    })
    return { kind: 'disconnected' }
  }
  // outside the transaction: the choice may ask the model provider whether it is up
  const chosen = await deps.runs.engine()
  const runId = newId()
  const run = await deps.db.transaction(async (tx): Promise<RunRow | null> => {
    if (eventId !== undefined && !(await firstDelivery(tx, team.orgId, team.teamId, eventId))) return null
    const where = { orgId: team.orgId, teamId: team.teamId, channel: decision.channel }
    if (!(await claimMessage(tx, { ...where, ts: decision.ts, runId, eventId: eventId ?? '' }))) return null
    const thread = { ...where, threadTs: decision.threadTs, runId }
    const { rootRunId } = await threadFor(tx, thread)
    const fields = {
      id: runId, orgId: team.orgId, prompt: decision.prompt, engine: chosen.engine, model: chosen.model,
      metadata: { slack: { teamId: team.teamId, channel: decision.channel, ts: decision.ts, threadTs: decision.threadTs, user: decision.user, eventId: eventId ?? null } }
    }
    let created = await deps.runs.insert(tx, { ...fields, rootRunId })
    if (!created) {
      // the thread's root is not this org's (any more): the Slack thread starts a new Cairn thread
      await restartThread(tx, thread)
      created = await deps.runs.insert(tx, { ...fields, rootRunId: null })
    }
    await tx.insert(slackReplies).values({
      runId, orgId: team.orgId, teamId: team.teamId, channel: decision.channel, threadTs: decision.threadTs, messageTs: decision.ts
    })
    return created
  })
  if (!run) return { kind: 'duplicate' }
  await deps.runs.announce([run])
  return { kind: 'started', run }
}
