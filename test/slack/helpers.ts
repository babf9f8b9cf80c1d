import { randomBytes } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { slackSignature } from '../../src/slack/signature.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { signUpWithOrg, type Teardown } from '../helper.js'
import { buildSlackApp } from './group.js'
import { startFakeSlack, type FakeSlack } from './fake-slack.js'

export const EVENTS_URL = '/api/chatplatform/slack/events'
export const INTERACTIONS_URL = '/api/chatplatform/slack/interactions'

export interface SlackApp {
  teamId: string
  team: string
  botToken: string
  signingSecret: string
  botUserId: string
  botId: string
}

let unique = 0
/** A Slack app installed in a fresh workspace of the fake (its bot token known to auth.test). */
export function installApp(fake: FakeSlack, name = 'acme'): SlackApp {
  unique++
  const suffix = `${process.pid}${unique}`.toUpperCase()
  const app: SlackApp = {
    teamId: `T${suffix}`,
    team: `${name}-${unique}`,
    botToken: `xoxb-${randomBytes(12).toString('hex')}`,
    signingSecret: randomBytes(16).toString('hex'),
    botUserId: `UB${suffix}`,
    botId: `B${suffix}`
  }
  fake.tokens.set(app.botToken, { team_id: app.teamId, team: app.team, user_id: app.botUserId, bot_id: app.botId })
  return app
}

/** PUT /api/integrations/slack as the cookie's user. */
export function connectSlack(
  app: FastifyInstance,
  cookie: string,
  slack: SlackApp,
  overrides: Record<string, unknown> = {}
) {
  return app.inject({
    method: 'PUT',
    url: '/api/integrations/slack',
    headers: { cookie },
    payload: { botToken: slack.botToken, signingSecret: slack.signingSecret, teamId: slack.teamId, ...overrides }
  })
}

export const nowSeconds = () => Math.floor(Date.now() / 1000)

/** Slack's request headers for a body: its timestamp (now unless given) and v0 signature under the secret. */
export function signedHeaders(secret: string, body: string, timestamp = String(nowSeconds())): Record<string, string> {
  return {
    'content-type': 'application/json',
    'x-slack-request-timestamp': timestamp,
    'x-slack-signature': slackSignature(secret, timestamp, body)
  }
}

/** POSTs a body to the ingress with these headers (the body sent as the exact bytes given). */
export function postEvent(app: FastifyInstance, body: string, headers: Record<string, string>) {
  return app.inject({ method: 'POST', url: EVENTS_URL, headers, payload: body })
}

/** A signed event callback for the app's team. */
export function sendEvent(
  app: FastifyInstance,
  slack: SlackApp,
  event: Record<string, unknown>,
  opts: { eventId?: string; retry?: number; timestamp?: string } = {}
) {
  const body = JSON.stringify(callback(slack, event, opts.eventId))
  const headers = signedHeaders(slack.signingSecret, body, opts.timestamp)
  if (opts.retry !== undefined)
    Object.assign(headers, { 'x-slack-retry-num': String(opts.retry), 'x-slack-retry-reason': 'http_timeout' })
  return postEvent(app, body, headers)
}

let events = 0
let stamps = 0
export const eventId = () => `Ev${process.pid}X${++events}`
/** A fresh message ts, like Slack's (`seconds.micros`), a little in the past. */
export const messageTs = () => `${nowSeconds() - 60}.${String(++stamps).padStart(6, '0')}`

/** Slack's envelope around an event. */
export function callback(slack: SlackApp, event: Record<string, unknown>, id = eventId()) {
  return {
    token: 'legacy-verification-token',
    team_id: slack.teamId,
    api_app_id: 'A0CAIRN',
    event,
    type: 'event_callback',
    event_id: id,
    event_time: nowSeconds(),
    authorizations: [{ team_id: slack.teamId, user_id: slack.botUserId, is_bot: true }]
  }
}

/** The `app_mention` and `message` events Slack sends for one message that mentions the bot. */
export function mentionPair(
  slack: SlackApp,
  o: { channel?: string; ts?: string; threadTs?: string; text?: string; user?: string } = {}
) {
  const ts = o.ts ?? messageTs()
  const base = {
    user: o.user ?? 'UHUMAN1',
    text: `<@${slack.botUserId}> ${o.text ?? 'what is the weather'}`,
    ts,
    channel: o.channel ?? 'C0GENERAL',
    event_ts: ts,
    ...(o.threadTs ? { thread_ts: o.threadTs } : {})
  }
  return {
    mention: { type: 'app_mention', ...base },
    message: { type: 'message', channel_type: 'channel', ...base }
  }
}

/** Runs stay queued: the ingress tests are about what it stores, not about answers. */
export const INGRESS_ENV = {
  RUN_WORKER_CONCURRENCY: '0',
  SLACK_OUTBOX: 'false',
  ALLOW_DEV_ORG: 'false',
  SECRETS_KEY: newKeyText()
}

/**
 * One app (the Slack group, test/slack/group.ts: events start runs, none runs) and one local
 * Slack for a test file (building an app is most of a test's time);
 * `setUp` gives every test its own org with a connected workspace.
 */
export async function ingressFixture(t: Teardown) {
  const fake = await startFakeSlack(t)
  const app = await buildSlackApp(t, { env: { ...INGRESS_ENV, SLACK_API_URL: fake.url } })
  return {
    async setUp() {
      const owner = await signUpWithOrg(app)
      const slack = installApp(fake)
      const res = await connectSlack(app, owner.cookie, slack)
      if (res.statusCode !== 200) throw new Error(res.body)
      return { fake, app, owner, slack }
    }
  }
}

/** Slack's interaction request body: a form whose `payload` field is the interaction as JSON. */
export const interactionForm = (payload: unknown) => `payload=${encodeURIComponent(JSON.stringify(payload))}`

/** Slack's headers for an interaction form: its timestamp (now unless given) and v0 signature under the secret. */
export function signedFormHeaders(
  secret: string,
  body: string,
  timestamp = String(nowSeconds())
): Record<string, string> {
  return { ...signedHeaders(secret, body, timestamp), 'content-type': 'application/x-www-form-urlencoded' }
}

/** POSTs a form body to the interactions route with these headers (the exact bytes given). */
export function postInteraction(app: FastifyInstance, body: string, headers: Record<string, string>) {
  return app.inject({ method: 'POST', url: INTERACTIONS_URL, headers, payload: body })
}

/** A `block_actions` payload: the user clicked a button of a message in the app's workspace. */
export function blockActions(
  slack: SlackApp,
  o: { user?: string; actionId: string; value: string; channel?: string; messageTs?: string }
) {
  return {
    type: 'block_actions',
    user: { id: o.user ?? 'UHUMAN1', username: 'human', name: 'human', team_id: slack.teamId },
    api_app_id: 'A0CAIRN',
    token: 'legacy-verification-token',
    container: {
      type: 'message',
      message_ts: o.messageTs ?? '1700000000.000001',
      channel_id: o.channel ?? 'C0GENERAL',
      is_ephemeral: false
    },
    trigger_id: '1.2.3',
    team: { id: slack.teamId, domain: slack.team },
    channel: { id: o.channel ?? 'C0GENERAL', name: 'general' },
    response_url: 'https://hooks.slack.test/actions/T/1/x',
    actions: [
      {
        action_id: o.actionId,
        block_id: `cairn_approval_${o.value}`,
        text: { type: 'plain_text', text: 'Approve' },
        value: o.value,
        type: 'button',
        action_ts: `${nowSeconds()}.000100`
      }
    ]
  }
}

/** A signed click on an approval button (Approve unless `deny`), as the app's workspace sends it. */
export function click(
  app: FastifyInstance,
  slack: SlackApp,
  approvalId: string,
  o: { deny?: boolean; user?: string; timestamp?: string } = {}
) {
  const body = interactionForm(
    blockActions(slack, { user: o.user, actionId: o.deny ? 'cairn_deny' : 'cairn_approve', value: approvalId })
  )
  return postInteraction(app, body, signedFormHeaders(slack.signingSecret, body, o.timestamp))
}
