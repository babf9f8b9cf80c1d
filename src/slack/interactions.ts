import { sql } from 'drizzle-orm'
import { ApiError } from '../../plugins/errors.js'
import { rowsOf, type Db } from '../db/client.js'
import { APPROVE_ACTION, DENY_ACTION, SLACK_DECIDER_PREFIX } from './approval-message.js'
import type { SlackTeamRow } from './slack-repo.js'

/**
 * What the Slack group needs of the runtime group: a person's decision on a waiting tool
 * call, recorded as the approvals route records it (`approval.resolved` is stored and the run
 * goes on); a refusal (not found, already decided, expired) is thrown as a 404 or 409 ApiError.
 */
export interface ApprovalDecisions {
  decide(
    orgId: string,
    runId: string,
    approvalId: string,
    decision: 'approve' | 'deny',
    decidedBy: string | null
  ): Promise<unknown>
}

/** The fields of an interaction payload this service reads; Slack sends many more. */
export interface SlackInteraction {
  type: string
  team?: { id?: string | undefined } | null | undefined
  user?: { id?: string | undefined; team_id?: string | undefined } | undefined
  actions?: Array<{ action_id?: string | undefined; value?: string | undefined }> | undefined
}

/** What became of one click. */
export type ClickOutcome =
  /** recorded */
  | { kind: 'decided'; eventId: number; decision: 'approve' | 'deny' }
  /** already decided, expired or cancelled: nothing changed (the message is brought up to date) */
  | { kind: 'refused'; eventId: number; reason: string }
  /** not an approval of a message posted for this team in its org: nothing changed */
  | { kind: 'unknown' }

/** A Slack user id (U…, W… on Enterprise Grid). */
const SLACK_USER = /^[A-Z0-9]{1,64}$/i
/** A click is one action; a payload naming more than this is not one we made. */
const MAX_ACTIONS = 5

/** The team an interaction payload comes from (the workspace where the button was clicked). */
export function interactionTeamId(payload: unknown): string | undefined {
  const p = (payload !== null && typeof payload === 'object' ? payload : {}) as SlackInteraction
  const id = p.team?.id ?? p.user?.team_id
  return typeof id === 'string' ? id : undefined
}

/**
 * The message a click came from, when it is ours: the approval belongs to the team's org
 * and is listed in an approval request posted for that team.
 */
async function requestOf(
  db: Db,
  team: SlackTeamRow,
  approvalId: string
): Promise<{ runId: string; eventId: number } | null> {
  const [row] = rowsOf<{ run_id: string; event_id: string | number }>(
    await db.execute(sql`
    select a.run_id, m.event_id from tool_approvals a
    join slack_approval_messages m on m.run_id = a.run_id and m.org_id = a.org_id
    where a.id = ${approvalId} and a.org_id = ${team.orgId} and m.team_id = ${team.teamId}
      and m.approval_ids @> jsonb_build_array(a.id)
    order by m.event_id desc
    limit 1`)
  )
  return row ? { runId: row.run_id, eventId: Number(row.event_id) } : null
}

/**
 * A verified `block_actions` payload: each click on an Approve or Deny button of ours is
 * recorded through the gateway's decision, as `slack:<user id>`. Anything else (other
 * payload types, other actions, another org's approval, a click without a user) changes
 * nothing. Only the decision is made here: updating the message is the caller's, later.
 */
export async function takeClicks(
  deps: { db: Db; decisions: ApprovalDecisions },
  team: SlackTeamRow,
  payload: SlackInteraction
): Promise<ClickOutcome[]> {
  if (payload.type !== 'block_actions') return []
  const user = payload.user?.id
  if (typeof user !== 'string' || !SLACK_USER.test(user)) return []
  const outcomes: ClickOutcome[] = []
  for (const action of (payload.actions ?? []).slice(0, MAX_ACTIONS)) {
    const decision = action.action_id === APPROVE_ACTION ? 'approve' : action.action_id === DENY_ACTION ? 'deny' : null
    if (decision === null || typeof action.value !== 'string' || action.value === '') continue
    const request = await requestOf(deps.db, team, action.value)
    if (!request) {
      outcomes.push({ kind: 'unknown' })
      continue
    }
    try {
      await deps.decisions.decide(team.orgId, request.runId, action.value, decision, `${SLACK_DECIDER_PREFIX}${user}`)
      outcomes.push({ kind: 'decided', eventId: request.eventId, decision })
    } catch (err) {
      if (!(err instanceof ApiError) || (err.statusCode !== 404 && err.statusCode !== 409)) throw err
      outcomes.push({ kind: 'refused', eventId: request.eventId, reason: err.message })
    }
  }
  return outcomes
}
