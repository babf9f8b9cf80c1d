import { Type } from 'typebox'
import { Id, IsoDate, named, Page, PageQuery, StrictObject } from './common.js'

export const ToolName = named('ToolName', Type.Union([
  Type.Literal('shell'), Type.Literal('read_file'), Type.Literal('write_file'), Type.Literal('list_files'), Type.Literal('memory_search'), Type.Literal('write_artifact')
], { description: 'a gateway tool' }))
export const ToolMode = named('ToolMode', Type.Union([Type.Literal('auto'), Type.Literal('approve')], {
  description: 'auto: runs at once; approve: waits for a person'
}))

export const ToolPolicy = named('ToolPolicy', Type.Object({
  tool: ToolName,
  mode: ToolMode,
  isDefault: Type.Boolean({ description: 'true when the org has not chosen and the built-in default applies' }),
  description: Type.String()
}))
export const ToolPolicyList = named('ToolPolicyList', Type.Object({ items: Type.Array(ToolPolicy) }))
export const ToolPolicyParams = StrictObject({ tool: ToolName })
export const SetToolPolicyBody = named('ToolPolicyRequest', StrictObject({ mode: ToolMode }))

export const RunParams = StrictObject({ id: Id })
export const ApprovalParams = StrictObject({ id: Id, approvalId: Id })
export const ThreadParams = StrictObject({ threadId: Id })
export const ApprovalListQuery = StrictObject({ ...PageQuery })

export const Approval = named('Approval', Type.Object({
  id: Type.String(),
  runId: Type.String(),
  rootRunId: Type.String(),
  callId: Type.String(),
  tool: Type.String(),
  arguments: Type.Record(Type.String(), Type.Unknown()),
  status: Type.Union([
    Type.Literal('pending'), Type.Literal('approved'), Type.Literal('denied'), Type.Literal('cancelled'), Type.Literal('expired')
  ]),
  decidedBy: Type.Union([Type.String(), Type.Null()]),
  decidedAt: Type.Union([IsoDate, Type.Null()]),
  expiresAt: IsoDate,
  createdAt: IsoDate
}))
export const ApprovalPage = named('ApprovalPage', Page(Approval))
export const DecideBody = named('ApprovalDecisionRequest', StrictObject({ decision: Type.Union([Type.Literal('approve'), Type.Literal('deny')]) }))
export const DecideResponse = named('ApprovalReply', Type.Object({ approval: Approval }))

/** A JSON text frame on the terminal socket (binary frames are raw terminal bytes). */
export const TerminalControl = named('TerminalControl', StrictObject({
  type: Type.Literal('resize'),
  cols: Type.Integer({ minimum: 1, maximum: 1000 }),
  rows: Type.Integer({ minimum: 1, maximum: 1000 })
}))

export const SwitchingProtocols = Type.Null({ description: 'the WebSocket upgrade was accepted' })
