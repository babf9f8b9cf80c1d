import { ErrorCode, LogLevel, WebClient, type ChatUpdateArguments, type Logger } from '@slack/web-api'

/** The metadata every reply carries, so a retry can find a reply that was posted but not recorded. */
export const REPLY_EVENT_TYPE = 'cairn_run_reply'
/** The same for an approval request (its payload names the run and the request: the run.requires_action event id). */
export const APPROVAL_EVENT_TYPE = 'cairn_approval_request'

/** One Block Kit block, as the Web API client types it. */
export type SlackBlock = Extract<ChatUpdateArguments, { blocks: unknown[] }>['blocks'][number]

/** A message made of blocks; `text` is the notification's and the fallback's. */
export interface BlockMessage {
  text: string
  blocks: SlackBlock[]
}

/** Slack's answer to auth.test: who the bot token belongs to. */
export interface SlackIdentity {
  teamId: string
  team: string | null
  botUserId: string | null
  botId: string | null
}

/**
 * Why a Web API call failed. `refused`: Slack answered `ok: false` (a definite answer,
 * nothing was done); `rate_limited`: 429 with Retry-After; `unavailable`: no usable answer
 * (network, timeout, a 5xx), after which the call may or may not have taken effect.
 */
export type SlackFailure =
  | { kind: 'refused'; error: string }
  | { kind: 'rate_limited'; retryAfterSeconds: number }
  | { kind: 'unavailable'; message: string }

export class SlackCallError extends Error {
  override name = 'SlackCallError'
  readonly failure: SlackFailure
  constructor(method: string, failure: SlackFailure) {
    super(
      failure.kind === 'refused'
        ? `Slack refused ${method}: ${failure.error}`
        : failure.kind === 'rate_limited'
          ? `Slack rate-limited ${method} (retry in ${failure.retryAfterSeconds} s)`
          : `Slack did not answer ${method}: ${failure.message}`
    )
    this.failure = failure
  }
}

export interface SlackApi {
  /** auth.test: the token's team and bot; throws SlackCallError */
  authTest(token: string): Promise<SlackIdentity>
  /** chat.postMessage in a thread, tagged with the run id; answers the posted message's ts */
  postReply(token: string, reply: { channel: string; threadTs: string; text: string; runId: string }): Promise<string>
  /**
   * conversations.replies: the ts of a reply to this run already in the thread (posted by an
   * attempt whose answer was lost), or null when there is none
   */
  findReply(
    token: string,
    where: { channel: string; threadTs: string; after: string; runId: string }
  ): Promise<string | null>
  /** chat.postMessage of an approval request in a thread, tagged with its run and request id; answers its ts */
  postApprovalRequest(
    token: string,
    request: BlockMessage & { channel: string; threadTs: string; runId: string; requestId: string }
  ): Promise<string>
  /** conversations.replies: the ts of that approval request already in the thread, or null */
  findApprovalRequest(
    token: string,
    where: { channel: string; threadTs: string; after: string; requestId: string }
  ): Promise<string | null>
  /** chat.update: the posted message's new text and blocks */
  updateMessage(token: string, message: BlockMessage & { channel: string; ts: string }): Promise<void>
  /** conversations.replies: a thread's messages, oldest first (its first message included), at most five pages */
  threadMessages(token: string, where: { channel: string; threadTs: string }): Promise<ThreadMessage[]>
}

/** A message of a thread as conversations.replies gives it (the fields read here). */
export interface ThreadMessage {
  ts: string
  text: string
  user: string | null
  botId: string | null
  subtype: string | null
  /** the author's display name (or real name) when Slack includes the profile */
  authorName: string | null
}

type Metadata = { event_type?: string; event_payload?: Record<string, unknown> } | undefined

/** The Web API client's own log goes to ours at debug level: we log what matters ourselves, without tokens. */
function quietLogger(debug: (message: string) => void): Logger {
  let level = LogLevel.WARN
  const at = (...msg: unknown[]) => debug(msg.map(String).join(' '))
  return {
    debug: () => {},
    info: () => {},
    warn: at,
    error: at,
    setLevel: (l) => void (level = l),
    getLevel: () => level,
    setName: () => {}
  }
}

function failureOf(err: unknown): SlackFailure {
  const e = err as {
    code?: string
    data?: { error?: string }
    retryAfter?: number
    statusCode?: number
    original?: Error
    message?: string
  }
  switch (e.code) {
    case ErrorCode.PlatformError:
      return { kind: 'refused', error: e.data?.error ?? 'unknown_error' }
    case ErrorCode.RateLimitedError:
      return { kind: 'rate_limited', retryAfterSeconds: Math.max(1, Math.ceil(e.retryAfter ?? 1)) }
    case ErrorCode.HTTPError:
      return { kind: 'unavailable', message: `HTTP ${e.statusCode ?? '?'}` }
    case ErrorCode.RequestError:
      return {
        kind: 'unavailable',
        message: e.original?.name === 'TimeoutError' ? 'timed out' : (e.original?.message ?? 'request failed')
      }
    default:
      return { kind: 'unavailable', message: e.message ?? String(err) }
  }
}

/**
 * Slack's Web API through @slack/web-api, at `SLACK_API_URL`. The client's own retries are
 * off (the outbox retries, with its own backoff, and knows whether a post may have landed)
 * and a 429 is answered at once rather than waited out.
 */
export function slackApi(o: { baseUrl: string; timeoutMs: number; debug: (message: string) => void }): SlackApi {
  const slackApiUrl = o.baseUrl.endsWith('/') ? o.baseUrl : `${o.baseUrl}/`
  const logger = quietLogger(o.debug)
  const client = (token: string) =>
    new WebClient(token, {
      slackApiUrl,
      timeout: o.timeoutMs,
      retryConfig: { retries: 0 },
      rejectRateLimitedCalls: true,
      logger,
      // absolute URLs in a method name never leave SLACK_API_URL
      allowAbsoluteUrls: false
    })
  async function call<T>(method: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn()
    } catch (err) {
      throw new SlackCallError(method, failureOf(err))
    }
  }
  /**
   * Our message in a thread whose metadata matches: read after `after`, a page at a time, at most five pages; its ts or
   * null.
   */
  async function findTagged(
    token: string,
    w: { channel: string; threadTs: string; after: string },
    matches: (meta: Metadata) => boolean
  ): Promise<string | null> {
    let cursor: string | undefined
    for (let page = 0; page < 5; page++) {
      const res = await call('conversations.replies', () =>
        client(token).conversations.replies({
          channel: w.channel,
          ts: w.threadTs,
          oldest: w.after,
          include_all_metadata: true,
          limit: 200,
          ...(cursor ? { cursor } : {})
        })
      )
      for (const m of res.messages ?? []) {
        if (typeof m.ts === 'string' && matches(m.metadata as Metadata)) return m.ts
      }
      cursor = res.response_metadata?.next_cursor || undefined
      if (!cursor) return null
    }
    return null
  }
  return {
    async authTest(token) {
      const res = await call('auth.test', () => client(token).auth.test())
      if (typeof res.team_id !== 'string' || res.team_id === '')
        throw new SlackCallError('auth.test', { kind: 'unavailable', message: 'no team_id in the answer' })
      return { teamId: res.team_id, team: res.team ?? null, botUserId: res.user_id ?? null, botId: res.bot_id ?? null }
    },
    async postReply(token, r) {
      const res = await call('chat.postMessage', () =>
        client(token).chat.postMessage({
          channel: r.channel,
          thread_ts: r.threadTs,
          text: r.text,
          unfurl_links: false,
          unfurl_media: false,
          metadata: { event_type: REPLY_EVENT_TYPE, event_payload: { run_id: r.runId } }
        })
      )
      return res.ts ?? ''
    },
    findReply: (token, w) =>
      findTagged(token, w, (meta) => meta?.event_type === REPLY_EVENT_TYPE && meta.event_payload?.run_id === w.runId),
    async postApprovalRequest(token, r) {
      const res = await call('chat.postMessage', () =>
        client(token).chat.postMessage({
          channel: r.channel,
          thread_ts: r.threadTs,
          text: r.text,
          blocks: r.blocks,
          unfurl_links: false,
          unfurl_media: false,
          metadata: { event_type: APPROVAL_EVENT_TYPE, event_payload: { run_id: r.runId, request_id: r.requestId } }
        })
      )
      return res.ts ?? ''
    },
    findApprovalRequest: (token, w) =>
      findTagged(
        token,
        w,
        (meta) => meta?.event_type === APPROVAL_EVENT_TYPE && meta.event_payload?.request_id === w.requestId
      ),
    async threadMessages(token, w) {
      const found: ThreadMessage[] = []
      let cursor: string | undefined
      for (let page = 0; page < 5; page++) {
        const res = await call('conversations.replies', () =>
          client(token).conversations.replies({
            channel: w.channel,
            ts: w.threadTs,
            limit: 200,
            ...(cursor ? { cursor } : {})
          })
        )
        // (the client's message type leaves out what Slack also sends: the subtype and the author's profile)
        for (const m of (res.messages ?? []) as Array<
          NonNullable<typeof res.messages>[number] & {
            subtype?: string
            user_profile?: { display_name?: string; real_name?: string }
          }
        >) {
          if (typeof m.ts !== 'string') continue
          const profile = m.user_profile
          found.push({
            ts: m.ts,
            text: m.text ?? '',
            user: m.user ?? null,
            botId: m.bot_id ?? null,
            subtype: m.subtype ?? null,
            authorName: profile?.display_name || profile?.real_name || null
          })
        }
        cursor = res.response_metadata?.next_cursor || undefined
        if (!cursor) break
      }
      return found
    },
    async updateMessage(token, m) {
      await call('chat.update', () =>
        client(token).chat.update({ channel: m.channel, ts: m.ts, text: m.text, blocks: m.blocks })
      )
    }
  }
}
