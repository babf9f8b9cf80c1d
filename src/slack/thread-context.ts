import type { FastifyBaseLogger } from 'fastify'
import type { Db } from '../db/client.js'
import type { ChatMessage } from '../runs/engines/types.js'
import type { RunThreadContext } from '../runs/ports/thread-context.js'
import { mentionsBot, plainText } from './ingress.js'
import { teamById } from './slack-repo.js'
import type { SlackApi, ThreadMessage } from './web-api.js'

/** At most this many of the colleagues' messages go with a mention (the latest ones). */
const MAX_MESSAGES = 20
/** Each is cut to this many characters. */
const MAX_CHARS = 4000

/** The Slack place a run's mention came from, as the ingress stored it in the run's metadata. */
interface SlackOrigin {
  teamId: string
  channel: string
  ts: string
  threadTs: string
}

function slackOriginOf(metadata: Record<string, unknown>): SlackOrigin | null {
  const slack = metadata['slack'] as Partial<SlackOrigin> | undefined
  if (!slack || typeof slack !== 'object') return null
  const { teamId, channel, ts, threadTs } = slack
  if (
    typeof teamId !== 'string' ||
    typeof channel !== 'string' ||
    typeof ts !== 'string' ||
    typeof threadTs !== 'string'
  )
    return null
  return { teamId, channel, ts, threadTs }
}

/** Slack timestamps ("1700000000.000100") in order. */
const before = (a: string, b: string) => {
  const [as, af = ''] = a.split('.')
  const [bs, bf = ''] = b.split('.')
  return as === bs ? af.padEnd(6, '0') < bf.padEnd(6, '0') : Number(as) < Number(bs)
}

/**
 * The messages of a thread that the mention at `ts` should see besides its own: those people
 * wrote after the bot's last reply and before the mention, leaving out the bot's and other
 * bots' messages and the messages that mention the bot (each of those is a run of the
 * thread, in its history already).
 */
export function colleaguesMessages(
  messages: ThreadMessage[],
  bot: { botUserId: string | null; botId: string | null },
  ts: string
): ThreadMessage[] {
  const earlier = messages.filter((m) => before(m.ts, ts))
  const byBot = (m: ThreadMessage) =>
    (bot.botId !== null && m.botId === bot.botId) || (bot.botUserId !== null && m.user === bot.botUserId)
  let since = 0
  earlier.forEach((m, i) => {
    if (byBot(m)) since = i + 1
  })
  return earlier
    .slice(since)
    .filter(
      (m) =>
        m.user !== null &&
        m.botId === null &&
        m.subtype !== 'bot_message' &&
        !mentionsBot(m.text, bot.botUserId) &&
        plainText(m.text) !== ''
    )
    .slice(-MAX_MESSAGES)
}

/** One colleague's message as the model sees it: who wrote it, then what they wrote. */
export function asUserMessage(m: ThreadMessage): ChatMessage {
  const author = m.authorName ? `${m.authorName} (<@${m.user}>)` : `<@${m.user}>`
  let text = plainText(m.text)
  if (text.length > MAX_CHARS) text = `${text.slice(0, MAX_CHARS)}\n[message cut at ${MAX_CHARS} characters]`
  return { role: 'user', content: `${author} wrote in the Slack thread:\n${text}` }
}

/**
 * A Slack-started run's context from its thread: what colleagues wrote there since the bot
 * last replied, read through conversations.replies when the run starts (not when the event
 * arrives: the ingress answers Slack at once, and the thread may have grown while the run
 * waited for the one before it).
 */
export function slackThreadContext(o: {
  db: Db
  api: SlackApi
  botToken: (orgId: string) => Promise<string | null>
  log: FastifyBaseLogger
}): RunThreadContext {
  return {
    async messagesFor(run) {
      if (run.origin !== 'chatplatform' || run.suspended) return []
      const origin = slackOriginOf(run.metadata)
      // a mention that starts its thread has nothing before it
      if (!origin || origin.threadTs === origin.ts) return []
      const team = await teamById(o.db, origin.teamId)
      if (!team || team.orgId !== run.orgId) return []
      const token = await o.botToken(run.orgId)
      if (token === null) return []
      const messages = await o.api.threadMessages(token, { channel: origin.channel, threadTs: origin.threadTs })
      return colleaguesMessages(messages, team, origin.ts).map(asUserMessage)
    }
  }
}
