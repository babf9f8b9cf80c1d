import { EventEmitter, once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Teardown } from '../helper.js'

/** Who a bot token is (auth.test). */
export interface FakeIdentity {
  team_id: string
  team: string
  user_id: string
  bot_id: string
}

/** A message the fake workspace holds (posted through chat.postMessage). */
export interface FakeMessage {
  token: string
  channel: string
  thread_ts: string | undefined
  text: string
  ts: string
  metadata: { event_type?: string; event_payload?: Record<string, unknown> } | undefined
  /** Block Kit blocks, when the message has them (changed by chat.update) */
  blocks: Array<Record<string, unknown>> | undefined
  /** a person's message (`say`): their user id and display name; absent: the bot posted it */
  user?: { id: string; name: string } | undefined
}

/** A chat.update the fake took. */
export interface FakeUpdate {
  token: string
  channel: string
  ts: string
  text: string
  blocks: Array<Record<string, unknown>> | undefined
}

/**
 * What one chat.postMessage attempt does instead of posting normally:
 * `http500` answers 500 and posts nothing; `error` answers `ok: false` with that error and
 * posts nothing; `loseAnswer` posts, then drops the connection before answering (the caller
 * cannot know it landed); `hold` posts and never answers (an instance that dies mid-post);
 * `rateLimit` answers 429 with Retry-After.
 */
export type PostBehaviour =
  { http500: true } | { error: string } | { loseAnswer: true } | { hold: true } | { rateLimit: number }

export interface FakeSlack {
  /** the Web API base, for SLACK_API_URL */
  url: string
  tokens: Map<string, FakeIdentity>
  /** messages posted, in order */
  messages: FakeMessage[]
  /** chat.update calls that changed a message, in order */
  updates: FakeUpdate[]
  /** the next chat.update attempts, in order (each used once) */
  updatePlan: Array<{ http500: true } | { error: string }>
  /** calls per method, answered or not */
  calls: Record<string, number>
  /** the next chat.postMessage attempts, in order (each used once) */
  postPlan: PostBehaviour[]
  /** auth.test's next answers instead of the normal one */
  authPlan: Array<{ http500: true } | { rateLimit: number }>
  /** resolves once `check` holds, checked after every request the fake handled */
  until(check: () => boolean): Promise<void>
  /**
   * A person writes in the workspace of `token` (no event is sent: the test sends one if it
   * wants): the message gets the next ts, after every message before it, and is read back by
   * conversations.replies with its author and their profile. Without `threadTs` it starts a thread.
   */
  say(token: string, m: { channel: string; threadTs?: string; text: string; user: string; name: string }): FakeMessage
}

/**
 * A local server speaking the parts of Slack's Web API the service calls: `auth.test`,
 * `chat.postMessage` (with message metadata and blocks), `chat.update` and `conversations.replies`
 * (`include_all_metadata`; people's messages, written with `say`, with their author), form-encoded
 * or JSON, the bot token as a bearer header.
 */
export async function startFakeSlack(t: Teardown): Promise<FakeSlack> {
  const changed = new EventEmitter()
  changed.setMaxListeners(100)
  let counter = 0
  const fake: Omit<FakeSlack, 'url'> = {
    tokens: new Map(),
    messages: [],
    updates: [],
    updatePlan: [],
    calls: {},
    postPlan: [],
    authPlan: [],
    async until(check) {
      while (!check()) await once(changed, 'handled')
    },
    say(token, m) {
      counter++
      const ts = `${Math.floor(Date.now() / 1000)}.${String(counter).padStart(6, '0')}`
      const message: FakeMessage = {
        token,
        channel: m.channel,
        thread_ts: m.threadTs ?? ts,
        text: m.text,
        ts,
        metadata: undefined,
        blocks: undefined,
        user: { id: m.user, name: m.name }
      }
      fake.messages.push(message)
      return message
    }
  }
  const held: ServerResponse[] = []

  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    const method = (req.url ?? '').replace(/^\/api\//, '').split('?')[0]!
    fake.calls[method] = (fake.calls[method] ?? 0) + 1
    const params: Record<string, string> = (req.headers['content-type'] ?? '').includes('json')
      ? Object.fromEntries(
          Object.entries(raw ? (JSON.parse(raw) as Record<string, unknown>) : {}).map(([k, v]) => [
            k,
            typeof v === 'string' ? v : JSON.stringify(v)
          ])
        )
      : Object.fromEntries(new URLSearchParams(raw))
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? params.token ?? ''
    const answer = (body: Record<string, unknown>, status = 200, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers })
      res.end(JSON.stringify(body))
    }
    try {
      const identity = fake.tokens.get(token)
      if (method === 'auth.test') {
        const plan = fake.authPlan.shift()
        if (plan && 'http500' in plan) return answer({ ok: false }, 500)
        if (plan && 'rateLimit' in plan)
          return answer({ ok: false, error: 'ratelimited' }, 429, { 'retry-after': String(plan.rateLimit) })
        if (!identity) return answer({ ok: false, error: 'invalid_auth' })
        return answer({ ok: true, url: `https://${identity.team}.slack.test/`, user: 'cairn', ...identity })
      }
      if (!identity) return answer({ ok: false, error: 'invalid_auth' })
      if (method === 'chat.postMessage') {
        const plan = fake.postPlan.shift()
        if (plan && 'http500' in plan) return answer({ ok: false }, 500)
        if (plan && 'error' in plan) return answer({ ok: false, error: plan.error })
        if (plan && 'rateLimit' in plan)
          return answer({ ok: false, error: 'ratelimited' }, 429, { 'retry-after': String(plan.rateLimit) })
        if (!params.channel) return answer({ ok: false, error: 'channel_not_found' })
        counter++
        const message: FakeMessage = {
          token,
          channel: params.channel,
          thread_ts: params.thread_ts,
          text: params.text ?? '',
          ts: `${Math.floor(Date.now() / 1000)}.${String(counter).padStart(6, '0')}`,
          metadata: params.metadata ? JSON.parse(params.metadata) : undefined,
          blocks: params.blocks ? JSON.parse(params.blocks) : undefined
        }
        fake.messages.push(message)
        if (plan && 'loseAnswer' in plan) {
          res.socket?.destroy()
          return
        }
        if (plan && 'hold' in plan) {
          held.push(res)
          return
        }
        return answer({
          ok: true,
          channel: message.channel,
          ts: message.ts,
          message: { text: message.text, ts: message.ts }
        })
      }
      if (method === 'chat.update') {
        const plan = fake.updatePlan.shift()
        if (plan && 'http500' in plan) return answer({ ok: false }, 500)
        if (plan && 'error' in plan) return answer({ ok: false, error: plan.error })
        const message = fake.messages.find(
          (m) => m.token === token && m.channel === params.channel && m.ts === params.ts
        )
        if (!message) return answer({ ok: false, error: 'message_not_found' })
        message.text = params.text ?? ''
        message.blocks = params.blocks ? JSON.parse(params.blocks) : undefined
        fake.updates.push({
          token,
          channel: message.channel,
          ts: message.ts,
          text: message.text,
          blocks: message.blocks
        })
        return answer({ ok: true, channel: message.channel, ts: message.ts, text: message.text })
      }
      if (method === 'conversations.replies') {
        const withMetadata = params.include_all_metadata === 'true'
        const oldest = Number(params.oldest ?? 0)
        const messages = fake.messages
          .filter(
            (m) =>
              m.token === token && m.channel === params.channel && m.thread_ts === params.ts && Number(m.ts) > oldest
          )
          .map((m) => ({
            type: 'message',
            ts: m.ts,
            thread_ts: m.thread_ts,
            text: m.text,
            ...(m.user
              ? { user: m.user.id, user_profile: { display_name: m.user.name, real_name: `${m.user.name} Real` } }
              : { bot_id: identity.bot_id, user: identity.user_id }),
            ...(withMetadata && m.metadata ? { metadata: m.metadata } : {})
          }))
        return answer({ ok: true, messages, has_more: false, response_metadata: { next_cursor: '' } })
      }
      return answer({ ok: false, error: 'unknown_method' })
    } finally {
      changed.emit('handled')
    }
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    for (const res of held) res.destroy()
    server.closeAllConnections()
    server.close()
  })
  return { ...fake, url: `http://127.0.0.1:${(server.address() as { port: number }).port}/api/` } as FakeSlack
}
