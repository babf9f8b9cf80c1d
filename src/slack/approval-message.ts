import type { BlockMessage, SlackBlock } from './web-api.js'

/** The buttons' action ids; a button's `value` is the approval id. */
export const APPROVE_ACTION = 'cairn_approve'
export const DENY_ACTION = 'cairn_deny'

/** A tool call's arguments are shown up to this many characters (already redacted of the run's secrets). */
export const MAX_ARGUMENTS_CHARS = 1500
/** Approvals shown with their own blocks; Slack allows 50 blocks in a message. */
export const MAX_SHOWN_APPROVALS = 20
/** Slack's limit for a section's text is 3,000 characters. */
const MAX_SECTION_CHARS = 2900

/** An approval as a message shows it (a tool_approvals row). */
export interface ShownApproval {
  id: string
  tool: string
  arguments: unknown
  status: string
  decidedBy: string | null
  expiresAt: Date
}

/** A Slack user id as the interactions route stores it in `decided_by`. */
export const SLACK_DECIDER_PREFIX = 'slack:'
const SLACK_USER_ID = /^[A-Z0-9]{1,64}$/i

/**
 * Slack's three mrkdwn escapes (&, <, >): text from a model or a tool can then neither
 * mention (`<!channel>`, `<@U…>`) nor link (`<https://…|…>`) anything.
 */
export function escapeMrkdwn(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}

/** At most `max` characters of `text`, never half a surrogate pair, with an ellipsis when cut. */
export function cut(text: string, max: number): string {
  if (text.length <= max) return text
  let end = max - 1
  const code = text.charCodeAt(end - 1)
  if (code >= 0xd800 && code <= 0xdbff) end--
  return `${text.slice(0, end)}…`
}

/** Whether the approval still waits: pending and not past its expiry. */
export function isWaiting(a: Pick<ShownApproval, 'status' | 'expiresAt'>, now: Date): boolean {
  return a.status === 'pending' && a.expiresAt.getTime() > now.getTime()
}

function argumentsJson(args: unknown): string {
  try {
    return JSON.stringify(args, null, 2) ?? 'null'
  } catch {
    return String(args)
  }
}

/** The arguments as a code block: cut, escaped, and unable to end the block early. */
function argumentsBlock(args: unknown): string {
  const shown = escapeMrkdwn(cut(argumentsJson(args), MAX_ARGUMENTS_CHARS)).replace(/```/g, '`\u200b`\u200b`')
  return `\`\`\`${cut(shown, MAX_SECTION_CHARS - 200)}\`\`\``
}

/** Who decided, as Slack shows it: the Slack user who clicked, or a person in Cairn. */
function decider(decidedBy: string | null): string {
  if (decidedBy === null) return ''
  if (decidedBy.startsWith(SLACK_DECIDER_PREFIX)) {
    const user = decidedBy.slice(SLACK_DECIDER_PREFIX.length)
    return SLACK_USER_ID.test(user) ? ` by <@${user}>` : ` by ${escapeMrkdwn(user)}`
  }
  return ' in Cairn'
}

/** What became of an approval that no longer waits. */
export function outcomeText(a: ShownApproval, now: Date): string {
  const status = a.status === 'pending' && !isWaiting(a, now) ? 'expired' : a.status
  switch (status) {
    case 'approved':
      return `:white_check_mark: Approved${decider(a.decidedBy)}`
    case 'denied':
      return `:no_entry_sign: Denied${decider(a.decidedBy)}`
    case 'expired':
      return ':hourglass: Expired: nobody decided in time (the call was denied)'
    case 'cancelled':
      return ':heavy_multiplication_x: Cancelled with the run'
    default:
      return escapeMrkdwn(status)
  }
}

function buttons(a: ShownApproval): SlackBlock {
  return {
    type: 'actions',
    block_id: `cairn_approval_${a.id}`,
    elements: [
      {
        type: 'button',
        action_id: APPROVE_ACTION,
        value: a.id,
        style: 'primary',
        text: { type: 'plain_text', text: 'Approve' }
      },
      {
        type: 'button',
        action_id: DENY_ACTION,
        value: a.id,
        style: 'danger',
        text: { type: 'plain_text', text: 'Deny' }
      }
    ]
  }
}

/**
 * The message asking for decisions on a run's tool calls: each call's tool and arguments,
 * Approve and Deny buttons under each one that still waits, and what became of the others
 * (who approved or denied, an expiry, a cancel). The same function renders the first post
 * and every update, so a message always shows the approvals' state when it was rendered.
 */
export function approvalMessage(runId: string, approvals: ShownApproval[], now: Date): BlockMessage {
  const waiting = approvals.filter((a) => isWaiting(a, now))
  const shown = approvals.slice(0, MAX_SHOWN_APPROVALS)
  const names = [...new Set(approvals.map((a) => a.tool))].join(', ')
  const header =
    waiting.length === 0
      ? 'The agent asked to use these tools:'
      : `:raised_hand: The agent wants to use ${waiting.length === 1 ? 'a tool' : `${waiting.length} tools`} and waits for your decision:`
  const blocks: SlackBlock[] = [{ type: 'section', text: { type: 'mrkdwn', text: header } }]
  for (const a of shown) {
    blocks.push({
      type: 'section',
      text: { type: 'mrkdwn', text: `*${escapeMrkdwn(cut(a.tool, 200))}*\n${argumentsBlock(a.arguments)}` }
    })
    blocks.push(
      isWaiting(a, now) ? buttons(a) : { type: 'context', elements: [{ type: 'mrkdwn', text: outcomeText(a, now) }] }
    )
  }
  const hidden = approvals.length - shown.length
  const more = hidden > 0 ? `${hidden} more ${hidden === 1 ? 'call waits' : 'calls wait'}: decide them in Cairn. ` : ''
  blocks.push({ type: 'context', elements: [{ type: 'mrkdwn', text: `${more}Run \`${escapeMrkdwn(runId)}\`` }] })
  const text = waiting.length === 0 ? `Tool calls decided: ${names}` : `Approval needed: ${names}`
  return { text: escapeMrkdwn(cut(text, 2000)), blocks }
}
