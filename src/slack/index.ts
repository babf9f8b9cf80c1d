import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import type { FastifyRequest } from 'fastify'
import { unauthorized } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import { IntegrationEnvelope } from '../../schemas/integrations.js'
import {
  ConnectSlackBody,
  SlackEventAck,
  SlackEventEnvelope,
  SlackInteractionAck,
  SlackInteractionForm,
  SlackSignatureHeaders,
  SlackSignedHeaders
} from '../../schemas/slack.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { integrationToWire } from '../integrations/integrations-repo.js'
import type { SlackEnvelope } from './ingress.js'
import { interactionTeamId, type SlackInteraction } from './interactions.js'
import type { SlackTeamRow } from './slack-repo.js'

const ADMIN = { scope: 'admin' } as const

/**
 * Connecting Slack (admin) and the chat-platform ingress (public, verified by
 * Slack's request signature instead of a session or key).
 */
const slackRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.put(
    '/integrations/slack',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'connectSlack',
        tags: ['integrations'],
        summary:
          'Connect the org to a Slack workspace (admin): the bot token is checked with auth.test, then it and the signing secret are sealed',
        description:
          "Checks a Slack bot token with Slack and seals it with the signing secret as the organization's Slack connection.",
        body: ConnectSlackBody,
        response: { 200: IntegrationEnvelope, ...errorResponses(502, 503) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const row = await app.slack.connect(principal.orgId, realUserId(principal), request.body)
      return { integration: integrationToWire('slack', row) }
    }
  )

  app.delete(
    '/integrations/slack',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'disconnectSlack',
        tags: ['integrations'],
        summary:
          'Disconnect Slack (admin): its credentials are deleted and its events refused; disconnecting twice is 204',
        description: "Deletes the organization's Slack credentials, after which its Slack events are refused.",
        response: { 204: { type: 'null', description: 'disconnected' }, ...errorResponses() }
      }
    },
    async (request, reply) => {
      await app.slack.disconnect(principalOf(request).orgId)
      return reply.code(204).send(null)
    }
  )

  await app.register(chatPlatformRoutes)
}

/** What a Slack request's body carries once read: the body the schema validates, and the team it names (unverified). */
interface ReadBody {
  body: unknown
  teamId: unknown
  urlVerification?: boolean
}

/**
 * The ingress in its own scope, where a body is kept as the bytes received: Slack signs
 * those bytes, and a body parsed and serialized again is not them. Each route reads its
 * body its own way (JSON for events, a form with a JSON `payload` for interactions), and one
 * hook checks the signature before validation (preValidation), so an unsigned request is
 * 401 whatever it holds; what the body carries is then validated like every other body
 * (hostile input refused as everywhere).
 */
const chatPlatformRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))

  const teams = new WeakMap<FastifyRequest, SlackTeamRow | null>()
  const jsonOf = (request: FastifyRequest, text: string) =>
    new Promise<unknown>((resolve) => {
      if (text.length === 0) return resolve(undefined)
      parseJson(request, text, (err, value) => resolve(err ? undefined : value))
    })
  const header = (request: FastifyRequest, name: string) => {
    const value = request.headers[name]
    return typeof value === 'string' ? value : undefined
  }

  /**
   * The preValidation hook of a Slack route: 401 unless Slack signed the bytes; then the body is what `read` made of
   * them.
   */
  const verifiedSlackRequest =
    (read: (request: FastifyRequest, raw: Buffer) => Promise<ReadBody>) => async (request: FastifyRequest) => {
      const rawBody = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0)
      const timestamp = header(request, 'x-slack-request-timestamp')
      const signature = header(request, 'x-slack-signature')
      if (timestamp === undefined || signature === undefined)
        throw unauthorized('X-Slack-Request-Timestamp and X-Slack-Signature are required')
      const { body, teamId, urlVerification = false } = await read(request, rawBody)
      const team = await app.slack.authenticate({
        timestamp,
        signature,
        rawBody,
        teamId: typeof teamId === 'string' ? teamId : undefined,
        urlVerification
      })
      teams.set(request, team)
      // a signed body that is not what the route reads is refused by the schema (400), like any other
      request.body = (body ?? null) as never
    }

  app.post(
    '/chatplatform/slack/events',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'receiveSlackEvent',
        tags: ['chatplatform'],
        summary:
          "Slack's Events API (public; verified by Slack's v0 signature): answers url_verification, acknowledges events at once and starts a run for a mention",
        description:
          "Receives Slack's Events API calls, checks their signature, answers URL verification, and starts a run when the bot is mentioned.",
        headers: SlackSignatureHeaders,
        body: SlackEventEnvelope,
        response: { 200: SlackEventAck, ...errorResponses() }
      },
      preValidation: verifiedSlackRequest(async (request, raw) => {
        const payload = await jsonOf(request, raw.toString('utf8'))
        const fields = (payload !== null && typeof payload === 'object' ? payload : {}) as {
          team_id?: unknown
          type?: unknown
        }
        return { body: payload, teamId: fields.team_id, urlVerification: fields.type === 'url_verification' }
      })
    },
    async (request) => {
      const body = request.body
      if (body.type === 'url_verification') return { challenge: body.challenge ?? '' }
      const team = teams.get(request)
      if (body.type === 'event_callback' && team) await app.slack.receive(team, body as SlackEnvelope)
      return { ok: true }
    }
  )

  // Slack's interactivity posts a form; only this route reads one, as the bytes received
  const interactions: FastifyPluginAsyncTypebox = async (scope) => {
    scope.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'buffer' }, (_request, body, done) =>
      done(null, body)
    )
    scope.post(
      '/chatplatform/slack/interactions',
      {
        config: { scope: 'public' },
        schema: {
          operationId: 'receiveSlackInteraction',
          tags: ['chatplatform'],
          summary:
            "Slack's interactivity (public; verified by Slack's v0 signature): a click on an approval request's Approve or Deny button decides that tool call as the Slack user",
          description:
            'Receives Slack button clicks, checks their signature, and decides the approval request behind the Approve or Deny button.',
          consumes: ['application/x-www-form-urlencoded'],
          headers: SlackSignedHeaders,
          body: SlackInteractionForm,
          response: { 200: SlackInteractionAck, ...errorResponses() }
        },
        preValidation: verifiedSlackRequest(async (request, raw) => {
          const field = new URLSearchParams(raw.toString('utf8')).get('payload')
          const payload = field === null ? undefined : await jsonOf(request, field)
          return { body: payload === undefined ? {} : { payload }, teamId: interactionTeamId(payload) }
        })
      },
      async (request, reply) => {
        const team = teams.get(request)
        if (team) await app.slack.interact(team, request.body.payload as SlackInteraction)
        // an empty body, as Slack's own SDKs acknowledge
        return reply.code(200).send(undefined as never)
      }
    )
  }
  await app.register(interactions)
}

// started only where the services it uses are: a group app without them fails at boot, naming what is missing
export default fp(slackRoutes, {
  name: 'slack-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'event-bus', 'slack'],
  encapsulate: true
})
