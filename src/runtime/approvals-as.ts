import type { FastifyInstance } from 'fastify'
import { forbidden, notFound } from '../../plugins/errors.js'
import type { Principal } from '../auth/principal.js'
import type { PageInput } from '../db/paging.js'
import { waitingApprovals } from './approvals-repo.js'
import type { ApprovalRow } from './gateway.js'

/** An approval as the routes and the MCP tools answer it. */
export function approvalView(row: ApprovalRow) {
  return {
    id: row.id,
    runId: row.runId,
    rootRunId: row.rootRunId,
    callId: row.callId,
    tool: row.tool,
    arguments: row.arguments,
    status: row.status,
    decidedBy: row.decidedBy,
    decidedAt: row.decidedAt ? row.decidedAt.toISOString() : null,
    expiresAt: row.expiresAt.toISOString(),
    createdAt: row.createdAt.toISOString()
  }
}

/**
 * Who a decision is recorded as: the person (their user id), or the API key an
 * integration acts through (`key:<key id>`), so a decision made by a key can be told
 * apart from every person's and traced to the key that made it.
 */
export function deciderOf(principal: Principal): string | null {
  if (principal.kind === 'key') return `key:${principal.keyId ?? ''}`
  return principal.userId
}

/** `GET /api/runs/:id/approvals` as the caller: the route and the MCP tool `list_approvals` both answer this. */
export async function listApprovalsAs(app: FastifyInstance, principal: Principal, runId: string, page: PageInput) {
  const { gateway, runs } = app.runtime
  // another org's run is as unknown as one that never was
  if (!(await runs.threadOfRun(principal.orgId, runId))) throw notFound('no such run in this organization')
  const found = await gateway.listApprovals(principal.orgId, runId, page)
  return { items: found.items.map(approvalView), nextCursor: found.nextCursor }
}

/**
 * `POST /api/runs/:id/approvals/:approvalId` as the caller (the route and the MCP tool
 * `decide_approval`). A tool call runs with everything its run can reach, so only the
 * person who started the run, an org owner or admin, or an API key of the org (an
 * integration an admin set up, acting for the org) may let it run; another member is
 * `403 forbidden`.
 */
export async function decideApprovalAs(
  app: FastifyInstance,
  principal: Principal,
  runId: string,
  approvalId: string,
  decision: 'approve' | 'deny'
) {
  const { gateway, runs } = app.runtime
  const run = await runs.threadOfRun(principal.orgId, runId)
  if (!run) throw notFound('no such run in this organization')
  const mayDecide =
    principal.kind === 'key' ||
    principal.role === 'owner' ||
    principal.role === 'admin' ||
    (principal.userId !== null && principal.userId === run.userId)
  if (!mayDecide)
    throw forbidden('only the person who started the run, or an organization owner or admin, may decide its tool calls')
  const row = await gateway.decide(principal.orgId, runId, approvalId, decision, deciderOf(principal))
  return { approval: approvalView(row) }
}

/** The calls of a run a person can still decide (id, tool, arguments), oldest first. */
export async function pendingCallsOf(app: FastifyInstance, orgId: string, runId: string) {
  const rows = await waitingApprovals(app.db, orgId, runId)
  return rows.map((row) => ({ id: row.id, tool: row.tool, arguments: row.arguments }))
}
