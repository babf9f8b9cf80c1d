import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyRequest } from 'fastify'
import { unauthorized } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import { IntegrationEnvelope } from '../../schemas/integrations.js'
import { ConnectSlackBody, SlackEventAck, SlackEventEnvelope, SlackSignatureHeaders } from '../../schemas/slack.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { integrationToWire } from '../integrations/integrations-repo.js'
import type { SlackEnvelope } from './ingress.js'
import type { SlackTeamRow } from './slack-repo.js'

const ADMIN = { scope: 'admin' } as const

/**
 * Contract 11: connecting Slack (admin) and the chat-platform ingress (public, verified by
 * Slack's request signature instead of a session or key).
 */
const slackRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.put('/integrations/slack', {
    config: ADMIN,
    schema: {
      operationId: 'connectSlack',
      tags: ['integrations'],
      summary: 'Connect the org to a Slack workspace (admin): the bot token is checked with auth.test, then it and the signing secret are sealed',
      body: ConnectSlackBody,
      response: { 200: IntegrationEnvelope, ...errorResponses(502, 503) }
    }
  }, async (request) => {
    const principal = principalOf(request)
    const row = await app.slack.connect(principal.orgId, realUserId(principal), request.body)
    return { integration: integrationToWire('slack', row) }
  })

  app.delete('/integrations/slack', {
    config: ADMIN,
    schema: {
      operationId: 'disconnectSlack',
      tags: ['integrations'],
      summary: 'Disconnect Slack (admin): its credentials are deleted and its events refused; disconnecting twice is 204',
      response: { 204: { type: 'null', description: 'disconnected' }, ...errorResponses() }
    }
  }, async (request, reply) => {
    await app.slack.disconnect(principalOf(request).orgId)
    return reply.code(204).send(null)
  })

  await app.register(chatPlatformRoutes)
}

/**
 * The ingress in its own scope, where a JSON body is kept as the bytes received: Slack signs
 * those bytes, and a body parsed and serialized again is not them. The signature is checked
 * before validation (preValidation), so an unsigned request is 401 whatever it holds; the
 * JSON it carries is then validated like every other body (contract 1.3 included).
 */
const chatPlatformRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))

  const teams = new WeakMap<FastifyRequest, SlackTeamRow | null>()
  const jsonOf = (request: FastifyRequest, raw: Buffer) => new Promise<unknown>((resolve) => {
    if (raw.length === 0) return resolve(undefined)
    parseJson(request, raw.toString('utf8'), (err, value) => resolve(err ? undefined : value))
  })
  const header = (request: FastifyRequest, name: string) => {
    const value = request.headers[name]
    return typeof value === 'string' ? value : undefined
  }

  app.post('/chatplatform/slack/events', {
    config: { scope: 'public' },
    schema: {
      operationId: 'receiveSlackEvent',
      tags: ['chatplatform'],
      summary: 'Slack\'s Events API (public; verified by Slack\'s v0 signature): answers url_verification, acknowledges events at once and starts a run for a mention',
      headers: SlackSignatureHeaders,
      body: SlackEventEnvelope,
      response: { 200: SlackEventAck, ...errorResponses() }
    },
    preValidation: async (request) => {
      const rawBody = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0)
      const timestamp = header(request, 'x-slack-request-timestamp')
      const signature = header(request, 'x-slack-signature')
      if (timestamp === undefined || signature === undefined) throw unauthorized('X-Slack-Request-Timestamp and X-Slack-Signature are required')
      const payload = await jsonOf(request, rawBody)
      const team = await app.slack.authenticate({ timestamp, signature, rawBody, payload })
      teams.set(request, team)
      // a signed body that is not JSON is refused by the schema (400), like any other
      request.body = (payload ?? null) as never
    }
  }, async (request) => {
    const body = request.body
    if (body.type === 'url_verification') return { challenge: body.challenge ?? '' }
    const team = teams.get(request)
    if (body.type === 'event_callback' && team) await app.slack.receive(team, body as SlackEnvelope)
    return { ok: true }
  })
}

export default slackRoutes
