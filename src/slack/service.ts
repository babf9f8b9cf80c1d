import type { FastifyInstance } from 'fastify'
import type { RunThreadContext } from '../runs/ports/thread-context.js'
import { slackThreadContext } from './thread-context.js'
import fp from 'fastify-plugin'
import {
  conflict,
  integrationFailed,
  secretsUnavailable,
  unauthorized,
  upstreamRateLimited,
  validationFailed
} from '../../plugins/errors.js'
import type { Clock } from '../worker-loop.js'
import type { Config } from '../config.js'
import { upsertIntegration, type IntegrationRow } from '../integrations/integrations-repo.js'
import type { SecretsService } from '../secrets/service.js'
import { ApprovalOutbox } from './approval-outbox.js'
import type { ChatPlatformRuns } from '../runs/ports/chat-platforms.js'
import { receiveEvent, type Received, type SlackEnvelope } from './ingress.js'
import { takeClicks, type ApprovalDecisions, type ClickOutcome, type SlackInteraction } from './interactions.js'
import { SlackOutbox } from './outbox.js'
import { freshTimestamp, verifySlackRequest } from './signature.js'
import { claimTeam, connectedTeams, dropConnection, teamById, type SlackTeamRow } from './slack-repo.js'
import { SlackCallError, slackApi, type SlackApi } from './web-api.js'

/** The org's Slack credentials, as internal secrets (`cairn:slack:…`): never listed, never given to runs. */
export const BOT_TOKEN = 'slack:bot-token'
export const SIGNING_SECRET = 'slack:signing-secret'

/** What a team id looks like (T…, E… for an Enterprise Grid); nothing else is looked up (it is not verified yet). */
const TEAM_ID = /^[A-Za-z0-9_-]{1,64}$/

/** How long a team and its signing secret are kept in memory, and how many at most. */
const KEEP_TEAM_MS = 30_000
const MAX_KEPT_TEAMS = 10_000

/** A url_verification names no team: it is tried against at most this many connected teams. */
const MAX_TRIAL_TEAMS = 10_000

export interface SlackRequest {
  timestamp: string | undefined
  signature: string | undefined
  rawBody: Buffer
  /** the team the body names (an event's `team_id`, an interaction's `team.id`), not verified yet */
  teamId: string | undefined
  /** an Events API url_verification, which names no team */
  urlVerification: boolean
}

/** The Slack group's instance-wide side, as `app.slack`. */
export interface SlackService {
  api: SlackApi
  outbox: SlackOutbox
  /** the approval requests posted for Slack-started runs waiting for decisions */
  approvalRequests: ApprovalOutbox
  /** a Slack-started run's context: what colleagues wrote in its thread since the bot last replied */
  threadContext: RunThreadContext
  /** `PUT /api/integrations/slack`: checks the token with auth.test, then keeps it */
  connect(
    orgId: string,
    connectedBy: string | null,
    body: { botToken: string; signingSecret: string; teamId: string }
  ): Promise<IntegrationRow>
  /** forgets the org's Slack connection and credentials; true when there was one */
  disconnect(orgId: string): Promise<boolean>
  /** a request to the ingress, verified (else 401): the team it came from (null for a url_verification) */
  authenticate(request: SlackRequest): Promise<SlackTeamRow | null>
  /** one verified event callback (src/slack/ingress.ts) */
  receive(team: SlackTeamRow, envelope: SlackEnvelope): Promise<Received>
  /**
   * one verified interaction payload: clicks on approval buttons are decided now; the
   * messages they came from are updated a moment later, after the answer (best effort)
   */
  interact(team: SlackTeamRow, payload: SlackInteraction): Promise<ClickOutcome[]>
}

declare module 'fastify' {
  interface FastifyInstance {
    slack: SlackService
  }
}

/** The variables the Slack service reads: a read of another is a type error. */
export type SlackConfig = Pick<
  Config,
  | 'SLACK_API_URL'
  | 'SLACK_TIMEOUT_MS'
  | 'SLACK_OUTBOX'
  | 'SLACK_OUTBOX_POLL_MS'
  | 'SLACK_OUTBOX_LEASE_MS'
  | 'SLACK_RETRY_BASE_MS'
  | 'SLACK_MAX_ATTEMPTS'
>

export interface SlackServiceOptions {
  config: SlackConfig
  clock: Clock
  runs: ChatPlatformRuns
  secrets: Pick<SecretsService, 'ring' | 'internal'>
  /** decisions on waiting tool calls (the runtime group's tool gateway) */
  approvals: ApprovalDecisions
}

/**
 * Slack integration and chat-platform ingress, the reply outbox worker, and approving tool calls from
 * Slack (a run waiting for approval is decided from its message's buttons).
 */
export default fp(
  async function slackService(app: FastifyInstance, opts: SlackServiceOptions) {
    const { config, clock, runs, secrets, approvals } = opts
    const db = app.db
    const log = app.log.child({ component: 'slack' })
    const api = slackApi({
      baseUrl: config.SLACK_API_URL,
      timeoutMs: config.SLACK_TIMEOUT_MS,
      debug: (message) => log.debug(message)
    })
    // both outboxes post with the bot token under the same SLACK_OUTBOX settings
    const posting = {
      db,
      api,
      bus: app.eventBus,
      log,
      clock,
      botToken: (orgId: string) => secrets.internal.open(orgId, BOT_TOKEN),
      pollMs: config.SLACK_OUTBOX_POLL_MS,
      leaseMs: config.SLACK_OUTBOX_LEASE_MS,
      retryBaseMs: config.SLACK_RETRY_BASE_MS,
      maxAttempts: config.SLACK_MAX_ATTEMPTS,
      batch: 16
    }
    const outbox = new SlackOutbox(posting)
    const approvalRequests = new ApprovalOutbox(posting)
    /** message updates after decisions, running after their requests were answered */
    const updates = new Set<Promise<void>>()
    function updateLater(orgId: string, eventIds: number[]): void {
      const update = new Promise<void>((resolve) => setImmediate(resolve)).then(async () => {
        for (const eventId of eventIds) await approvalRequests.refreshQuietly(orgId, eventId)
      })
      updates.add(update)
      void update.finally(() => updates.delete(update))
    }

    /**
     * Teams and their signing secrets, kept briefly so the ingress costs no lookup per event.
     * A signature that does not verify under a kept secret is checked again against the
     * database (a secret rotated on another instance works at once); a team disconnected on
     * another instance may still verify here for a little while, but then its events store
     * nothing (every write is gated on the team still being connected).
     */
    const teams = new Map<string, { team: SlackTeamRow; signingSecret: string | null; at: number }>()
    async function teamEntry(teamId: string) {
      const team = await teamById(db, teamId)
      if (!team) {
        teams.delete(teamId)
        return null
      }
      const entry = { team, signingSecret: await secrets.internal.open(team.orgId, SIGNING_SECRET), at: Date.now() }
      if (teams.size >= MAX_KEPT_TEAMS) teams.clear()
      teams.set(teamId, entry)
      return entry
    }
    const verifies = (
      signingSecret: string | null,
      request: SlackRequest & { timestamp: string; signature: string },
      now: Date
    ) =>
      signingSecret !== null &&
      verifySlackRequest({
        signingSecret,
        timestamp: request.timestamp,
        signature: request.signature,
        rawBody: request.rawBody,
        now
      })

    async function disconnect(orgId: string): Promise<boolean> {
      const had = await db.transaction((tx) => dropConnection(tx, orgId))
      await secrets.internal.remove(orgId, [BOT_TOKEN, SIGNING_SECRET])
      teams.clear()
      return had
    }

    app.decorate('slack', {
      api,
      outbox,
      threadContext: slackThreadContext({ db, api, botToken: posting.botToken, log }),
      approvalRequests,
      async connect(orgId, connectedBy, body) {
        if (!secrets.ring) throw secretsUnavailable()
        const held = await teamById(db, body.teamId)
        if (held && held.orgId !== orgId) throw conflict('this Slack team is connected to another organization')
        let identity
        try {
          identity = await api.authTest(body.botToken)
        } catch (err) {
          if (!(err instanceof SlackCallError)) throw err
          const f = err.failure
          if (f.kind === 'refused')
            throw validationFailed([{ path: '/body/botToken', message: `Slack refused this bot token (${f.error})` }])
          if (f.kind === 'rate_limited') throw upstreamRateLimited('Slack', f.retryAfterSeconds)
          throw integrationFailed(`Slack did not answer auth.test: ${f.message}`)
        }
        if (identity.teamId !== body.teamId) {
          throw validationFailed([
            {
              path: '/body/teamId',
              message: `the bot token belongs to Slack team ${identity.teamId}, not ${body.teamId}`
            }
          ])
        }
        await secrets.internal.put(orgId, BOT_TOKEN, body.botToken)
        await secrets.internal.put(orgId, SIGNING_SECRET, body.signingSecret)
        const row = await db.transaction(async (tx) => {
          if (
            !(await claimTeam(tx, orgId, {
              teamId: identity.teamId,
              botUserId: identity.botUserId,
              botId: identity.botId
            }))
          ) {
            throw conflict('this Slack team is connected to another organization')
          }
          return upsertIntegration(tx, orgId, 'slack', {
            account: identity.team ?? identity.teamId,
            settings: {
              teamId: identity.teamId,
              teamName: identity.team,
              botUserId: identity.botUserId,
              botId: identity.botId
            },
            connectedBy
          })
        })
        teams.clear()
        return row
      },
      disconnect,
      async authenticate(request) {
        const { timestamp, signature, teamId } = request
        if (timestamp === undefined || signature === undefined)
          throw unauthorized('X-Slack-Request-Timestamp and X-Slack-Signature are required')
        const now = clock.now()
        // before any lookup: a replayed or future request costs no query
        if (!freshTimestamp(timestamp, now))
          throw unauthorized('X-Slack-Request-Timestamp is outside the 5-minute window')
        const signed = { ...request, timestamp, signature }
        if (teamId !== undefined && TEAM_ID.test(teamId)) {
          const kept = teams.get(teamId)
          if (kept && Date.now() - kept.at < KEEP_TEAM_MS && verifies(kept.signingSecret, signed, now)) return kept.team
          const entry = await teamEntry(teamId)
          // an unknown team and a wrong signature answer alike
          if (entry && verifies(entry.signingSecret, signed, now)) return entry.team
        } else if (request.urlVerification) {
          for (const team of await connectedTeams(db, MAX_TRIAL_TEAMS)) {
            if (verifies(await secrets.internal.open(team.orgId, SIGNING_SECRET), signed, now)) return null
          }
        }
        throw unauthorized('the request is not signed by a connected Slack app')
      },
      async receive(team, envelope) {
        const received = await receiveEvent({ db, runs }, team, envelope)
        if (received.kind === 'disconnected') {
          teams.clear()
          await secrets.internal.remove(team.orgId, [BOT_TOKEN, SIGNING_SECRET])
          log.info(
            { orgId: team.orgId, teamId: team.teamId },
            'Slack disconnected: the app was uninstalled or its tokens revoked'
          )
        }
        return received
      },
      async interact(team, payload) {
        const outcomes = await takeClicks({ db, decisions: approvals }, team, payload)
        for (const outcome of outcomes) {
          if (outcome.kind === 'decided')
            log.info(
              { orgId: team.orgId, eventId: outcome.eventId, decision: outcome.decision },
              'slack: a tool call was decided from Slack'
            )
        }
        const eventIds = [...new Set(outcomes.flatMap((o) => (o.kind === 'unknown' ? [] : [o.eventId])))]
        if (eventIds.length > 0) updateLater(team.orgId, eventIds)
        return outcomes
      }
    } satisfies SlackService)

    app.addHook('onReady', async () => {
      if (config.SLACK_OUTBOX) {
        outbox.start()
        approvalRequests.start()
      }
    })
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the Slack outboxes', (ms) =>
        Promise.all([outbox.stop(ms), approvalRequests.stop(ms), ...updates])
      )
    })
  },
  { name: 'slack', fastify: '5.x', dependencies: ['db', 'event-bus', 'secrets', 'shutdown-refusals'] }
)
