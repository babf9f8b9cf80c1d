import { Type } from 'typebox'
import { Id, IsoDate, LiteralUnion, named, Page, PageQuery, StrictObject } from './common.js'

/**
 * The gateway's tools, its policy modes and approval states: one list each (src/runtime builds its tables and tools
 * from them).
 */
export const TOOL_NAMES = [
  'shell',
  'read_file',
  'write_file',
  'list_files',
  'memory_search',
  'write_artifact',
  'knowledge_search',
  'propose_knowledge',
  'propose_skill',
  'remember'
] as const
export const TOOL_MODES = ['auto', 'approve', 'deny'] as const
export const APPROVAL_STATUSES = ['pending', 'approved', 'denied', 'cancelled', 'expired'] as const
export const ToolName = named('ToolName', LiteralUnion(TOOL_NAMES, { description: 'a gateway tool' }))
export const ToolMode = named(
  'ToolMode',
  LiteralUnion(TOOL_MODES, {
    description:
      "auto: runs at once; approve: waits for a person; deny: never offered to the organization's runs (a call naming it is refused)"
  })
)

/** A tool a policy can name: a built-in one, or an MCP server's as runs see it. */
export const PolicyToolName = Type.Union([
  ToolName,
  Type.String({
    pattern: '^mcp__[a-z0-9_-]{1,32}__[A-Za-z0-9_-]{1,64}$',
    maxLength: 100,
    description: "a tool of one of the organization's MCP servers, mcp__<server>__<tool>"
  })
])

export const ToolPolicy = named(
  'ToolPolicy',
  Type.Object({
    tool: PolicyToolName,
    mode: ToolMode,
    isDefault: Type.Boolean({ description: 'true when the org has not chosen and the built-in default applies' }),
    description: Type.String()
  })
)
export const ToolPolicyList = named('ToolPolicyList', Type.Object({ items: Type.Array(ToolPolicy) }))
export const ToolPolicyParams = StrictObject({ tool: PolicyToolName })
export const SetToolPolicyBody = named('ToolPolicyRequest', StrictObject({ mode: ToolMode }))

export const RunParams = StrictObject({ id: Id })
export const ApprovalParams = StrictObject({ id: Id, approvalId: Id })
export const ThreadParams = StrictObject({ threadId: Id })
export const ApprovalListQuery = StrictObject({ ...PageQuery })

export const Approval = named(
  'Approval',
  Type.Object({
    id: Type.String(),
    runId: Type.String(),
    rootRunId: Type.String(),
    callId: Type.String(),
    tool: Type.String(),
    arguments: Type.Record(Type.String(), Type.Unknown()),
    status: LiteralUnion(APPROVAL_STATUSES),
    decidedBy: Type.Union([Type.String(), Type.Null()], {
      description:
        'who decided: the Cairn user id, or `slack:<Slack user id>` when decided with a button in Slack; null while pending and for expired or cancelled calls'
    }),
    decidedAt: Type.Union([IsoDate, Type.Null()]),
    expiresAt: IsoDate,
    createdAt: IsoDate
  })
)
export const ApprovalPage = named('ApprovalPage', Page(Approval))
export const DecideBody = named(
  'ApprovalDecisionRequest',
  StrictObject({ decision: Type.Union([Type.Literal('approve'), Type.Literal('deny')]) })
)
export const DecideResponse = named('ApprovalReply', Type.Object({ approval: Approval }))

/** A JSON text frame on the terminal socket (binary frames are raw terminal bytes). */
export const TerminalControl = named(
  'TerminalControl',
  StrictObject({
    type: Type.Literal('resize'),
    cols: Type.Integer({ minimum: 1, maximum: 1000 }),
    rows: Type.Integer({ minimum: 1, maximum: 1000 })
  })
)

export const SwitchingProtocols = Type.Null({ description: 'the WebSocket upgrade was accepted' })
