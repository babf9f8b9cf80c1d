import { Value } from 'typebox/value'
import { conflict, notFound } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import {
  cancelPendingApprovals,
  decidePending,
  expireApproval,
  getApproval,
  insertApproval,
  listApprovals,
  settledStatus,
  type ApprovalRow
} from './approvals-repo.js'
import { policyMode, policyRows, setPolicyMode } from './policies-repo.js'
import type {
  ArtifactWriter,
  KnowledgeTools,
  McpToolSource,
  MemoryTools,
  RunDirectory,
  RunEventWriter,
  SkillTools
} from './ports.js'
import { SandboxError, type SandboxManager } from './sandbox.js'
import type { ThreadWorkspaces, WorkspaceSession } from './workspaces.js'
import { NO_SECRETS, type Redactor } from '../secrets/redact.js'
import { endAttempt, startAttempt, type AttemptKey } from './attempts-repo.js'
import { RunHandedBack } from './ports.js'
import type { ApprovalStatus, ToolMode } from './tables.js'
import { isToolName, TOOL_NAMES, TOOLS, toolDefinitions, type ToolArgs, type ToolName } from './tools.js'
import type { PageInput } from '../db/paging.js'

export interface ToolCallInput {
  orgId: string
  runId: string
  /** the run's thread; looked up through the RunDirectory when absent */
  rootRunId?: string
  /** the model's tool call id; one is made when absent */
  callId?: string
  name: string
  /** the model's arguments: a JSON string (as OpenAI sends them) or an object */
  arguments: string | Record<string, unknown>
  /** aborting stops the call while it runs */
  signal?: AbortSignal
  /** the run's secrets: the environment of its sandbox commands */
  env?: Record<string, string> | undefined
  /** what the call stores, streams and answers goes through it (the run's secret values redacted) */
  redact?: Redactor | undefined
  /**
   * A call that needs a person's decision is stored (`tool_approvals`, `approval.requested`)
   * and answered `pending` at once: nothing waits in the gateway (the run
   * leaves its worker and asks again, with `approvalId`, once it is decided). `defer`
   * answers `deferred` for a call that needs no decision, unexecuted and unrecorded (a call
   * after one that waits runs after it).
   */
  defer?: boolean | undefined
  /** the call was asked and this approval decided: it runs (approved) or is answered denied, never asked again */
  approvalId?: string | undefined
  /**
   * the model round of the run that asked for the call (0 when absent): with the call id, what its start and end are
   * stored under, so a run that goes on elsewhere never runs a started call again
   */
  round?: number | undefined
}

export type ToolStatus = 'ok' | 'error' | 'denied' | 'cancelled' | 'expired' | 'interrupted' | 'pending' | 'deferred'

/** What the model is told of a call a person denied. */
export const DENIED_CONTENT = 'the call was denied by a person'
/** What the model is told of a call nobody decided in time. */
export const EXPIRED_CONTENT = 'the call expired without a decision'
/** What the model is told of a call that had started when its instance stopped (it is not run again). */
export const INTERRUPTED_CONTENT = 'the call was interrupted by a restart and may have partly run'

export interface ToolResult {
  callId: string
  tool: string
  status: ToolStatus
  /** the text handed back to the model (the `tool` message content), bounded */
  content: string
  truncated: boolean
  approvalId: string | null
}

export interface GatewayOptions {
  db: Db
  /** null when there is no sandbox: sandbox tools answer an error naming `sandboxUnavailable` */
  sandboxes: SandboxManager | null
  /** the thread workspaces a run holds while it uses its sandbox (null: they stay on this disk) */
  workspaces?: ThreadWorkspaces | null | undefined
  /** why there is no sandbox (SandboxStatus.reason) */
  sandboxUnavailable?: string | null
  runs: RunDirectory
  events: RunEventWriter
  memory: MemoryTools
  artifacts: ArtifactWriter
  knowledge: KnowledgeTools
  skills: SkillTools
  /** the org's MCP servers' tools (`mcp__<server>__<tool>`, policy `approve` unless set); absent: none */
  mcp?: McpToolSource | undefined
  outputMaxBytes: number
  execTimeoutMs: number
  approvalTimeoutMs: number
  log: { error(obj: object, msg: string): void }
}

export type { ApprovalRow }

interface InFlight {
  controller: AbortController
}

/**
 * The one way tools run: validates the call, applies the org's policy (`auto` runs at
 * once, `approve` stores a `tool_approvals` row and answers `pending`; asked again with
 * the approval's id once a person decided, it runs or is answered denied), executes in
 * the thread's sandbox, bounds the output and records `tool.call` / `tool.result`.
 */
export class ToolGateway {
  private readonly opts: GatewayOptions
  private readonly inFlight = new Map<string, Set<InFlight>>()
  /** each run's session on its thread's workspace, opened at its first sandbox use, ended by settleWorkspace */
  private readonly workspaceSessions = new Map<string, Promise<WorkspaceSession>>()

  constructor(options: GatewayOptions) {
    this.opts = options
  }

  definitions() {
    return toolDefinitions()
  }

  /** The built-in tools and, after them, the tools of the org's MCP servers that answer now. */
  async definitionsFor(orgId: string) {
    return [...toolDefinitions(), ...(this.opts.mcp ? await this.opts.mcp.definitions(orgId) : [])]
  }

  /** The tools the org set to `deny`: its runs are never offered them. */
  async deniedTools(orgId: string): Promise<Set<string>> {
    return new Set((await policyRows(this.opts.db, orgId)).filter((r) => r.mode === 'deny').map((r) => r.tool))
  }

  /** a built-in tool, or one of an MCP server (whether the org has it is the server's to say) */
  private known(name: string): boolean {
    return isToolName(name) || this.opts.mcp?.isMcpTool(name) === true
  }

  /**
   * Writes files into a thread's workspace inside its confinement, like `write_file` (a
   * run's attachments, before it starts); false when this server has no sandbox. `signal`
   * (the run's cancel) also stops a wait for the workspace held on another instance.
   */
  async putFiles(
    ref: { orgId: string; runId: string; rootRunId: string },
    files: Array<{ path: string; data: Buffer }>,
    signal?: AbortSignal
  ): Promise<boolean> {
    if (!this.opts.sandboxes) return false
    await this.holdWorkspace({ orgId: ref.orgId, runId: ref.runId, rootRunId: ref.rootRunId }, signal)
    const { sandbox, release } = await this.opts.sandboxes.acquire({ orgId: ref.orgId, threadId: ref.rootRunId })
    try {
      for (const file of files) await sandbox.writeFile(file.path, file.data, Number.MAX_SAFE_INTEGER)
    } finally {
      release()
    }
    return true
  }

  async execute(input: ToolCallInput): Promise<ToolResult> {
    const { orgId, runId } = input
    const redact = input.redact ?? NO_SECRETS
    const callId = input.callId ?? newId()
    const rootRunId = input.rootRunId ?? (await this.opts.runs.threadOfRun(orgId, runId))?.rootRunId
    if (!rootRunId)
      return {
        callId,
        tool: input.name,
        status: 'error',
        content: 'error: the run does not exist',
        truncated: false,
        approvalId: null
      }

    const parsed = parseArguments(input.arguments)
    if (input.approvalId !== undefined) return this.resume(input, rootRunId, callId, parsed, redact)
    const mode = this.known(input.name) && parsed !== null ? await this.modeFor(orgId, input.name) : null
    // a denied tool is not offered; a model that names it anyway gets an answer, never a run of it
    if (mode === 'deny')
      return {
        callId,
        tool: input.name,
        status: 'error',
        content: `error: the tool ${JSON.stringify(input.name)} is not available: the organization's policy denies it`,
        truncated: false,
        approvalId: null
      }
    if (input.defer && mode !== 'approve')
      return { callId, tool: input.name, status: 'deferred', content: '', truncated: false, approvalId: null }
    // a call that goes on from a run handed back was announced where it started: told once
    const announce = () =>
      this.opts.events.emit(
        orgId,
        runId,
        'tool.call',
        redact.deep({ callId, tool: input.name, arguments: parsed ?? input.arguments })
      )
    const finish = (result: ToolResult) => this.finish(orgId, runId, redact.deep(result))
    const invalid = !this.known(input.name)
      ? `unknown tool ${JSON.stringify(input.name)}`
      : parsed === null
        ? 'the arguments are not a JSON object'
        : // an MCP tool's arguments are checked by its server, against the schema it listed
          isToolName(input.name)
          ? firstError(input.name, parsed)
          : null
    if (invalid !== null) {
      await announce()
      return finish({
        callId,
        tool: input.name,
        status: 'error',
        content: `error: ${invalid}`,
        truncated: false,
        approvalId: null
      })
    }
    const tool = input.name
    const args = parsed as Record<string, unknown>

    if (mode === 'approve') {
      await announce()
      const approval = await this.requestApproval(orgId, runId, rootRunId, callId, tool, redact.deep(args))
      return { callId, tool, status: 'pending', content: '', truncated: false, approvalId: approval.id }
    }
    return this.runAndFinish(input, rootRunId, callId, tool, args, null, redact, announce)
  }

  /**
   * Runs a call in the thread's sandbox (cancelRun stops it here), bounds its output and
   * records its `tool.result`.
   */
  private async runAndFinish(
    input: ToolCallInput,
    rootRunId: string,
    callId: string,
    tool: string,
    args: Record<string, unknown>,
    approvalId: string | null,
    redact: Redactor,
    /** records the call's `tool.call` (a call asked for approval recorded it then): once it starts here */
    announce?: () => Promise<void>
  ): Promise<ToolResult> {
    const { orgId, runId } = input
    const finish = (result: ToolResult) => this.finish(orgId, runId, redact.deep(result))
    const flight: InFlight = { controller: new AbortController() }
    const runKey = `${orgId}/${runId}`
    const onAbort = () => flight.controller.abort()
    input.signal?.addEventListener('abort', onAbort, { once: true })
    if (input.signal?.aborted) flight.controller.abort()
    let set = this.inFlight.get(runKey)
    if (!set) this.inFlight.set(runKey, (set = new Set()))
    set.add(flight)
    // a run that leaves this worker to go on elsewhere: what runs now is interrupted, and no end is recorded
    const handedBack = () => input.signal?.reason instanceof RunHandedBack
    try {
      if (flight.controller.signal.aborted) {
        if (handedBack()) throw input.signal!.reason
        await announce?.()
        return await finish({
          callId,
          tool,
          status: 'cancelled',
          content: 'the run was cancelled',
          truncated: false,
          approvalId
        })
      }
      // the call's start is stored before it runs: a run that goes on elsewhere never runs it twice
      const key: AttemptKey = { orgId, runId, round: input.round ?? 0, callId }
      const begun = await startAttempt(this.opts.db, key, approvalId)
      if (begun.kind === 'ended')
        return {
          callId,
          tool,
          status: begun.status as ToolStatus,
          content: begun.content,
          truncated: false,
          approvalId
        }
      if (begun.kind === 'interrupted') return this.interrupted(input, rootRunId, key, tool, args, approvalId, redact)
      await announce?.()
      // a fact is stored as the model wrote it, but never with a secret's value
      const outcome = await this.run(
        orgId,
        runId,
        rootRunId,
        tool,
        tool === 'remember' ? redact.deep(args) : args,
        flight.controller.signal,
        input.env
      )
      // redacted before it is cut, so a value is never left half-shown at the end
      const bounded = bound(redact.text(outcome.content), this.opts.outputMaxBytes, outcome.omittedBytes ?? 0)
      if (flight.controller.signal.aborted && handedBack()) throw input.signal!.reason
      const status: ToolStatus = flight.controller.signal.aborted ? 'cancelled' : outcome.ok ? 'ok' : 'error'
      const result = redact.deep({
        callId,
        tool,
        status,
        content: bounded.text,
        truncated: bounded.truncated || outcome.truncated,
        approvalId
      })
      if (status !== 'cancelled') await endAttempt(this.opts.db, key, status, result.content)
      return await this.finish(orgId, runId, result)
    } finally {
      input.signal?.removeEventListener('abort', onAbort)
      set.delete(flight)
      if (set.size === 0) this.inFlight.delete(runKey)
    }
  }

  /**
   * A call whose approval was asked before its run left the worker: it runs if approved;
   * denied, expired (an undecided approval past its time expires now) or cancelled, the
   * model is told so. Its `tool.call` was recorded when it was asked.
   */
  private async resume(
    input: ToolCallInput,
    rootRunId: string,
    callId: string,
    parsed: Record<string, unknown> | null,
    redact: Redactor
  ): Promise<ToolResult> {
    const { orgId, runId } = input
    const approvalId = input.approvalId!
    const finish = (result: ToolResult) => this.finish(orgId, runId, redact.deep(result))
    const status = (await settledStatus(this.opts.db, orgId, runId, approvalId)) ?? 'cancelled'
    if (status === 'pending')
      return { callId, tool: input.name, status: 'pending', content: '', truncated: false, approvalId }
    if (status === 'expired')
      await this.opts.events.emit(orgId, runId, 'approval.expired', { approvalId, callId, tool: input.name })
    if (status !== 'approved' || !this.known(input.name) || parsed === null) {
      return finish({
        callId,
        tool: input.name,
        status: status === 'approved' ? 'error' : (status as ToolStatus),
        content: status === 'approved' ? 'error: the arguments are not a JSON object' : deniedContent(status),
        truncated: false,
        approvalId
      })
    }
    return this.runAndFinish(input, rootRunId, callId, input.name, parsed, approvalId, redact)
  }

  /**
   * A call found started and never ended (its instance stopped under it, the run went on
   * here): it is not run again. A call that needed no decision is answered as interrupted
   * (and that answer stored as its end, so it is given again if the run is handed back once
   * more); a call a person approved needs a new decision, since the approval was for one run
   * of it: a new approval is asked and the run waits for it.
   */
  private async interrupted(
    input: ToolCallInput,
    rootRunId: string,
    key: AttemptKey,
    tool: string,
    args: Record<string, unknown>,
    approvalId: string | null,
    redact: Redactor
  ): Promise<ToolResult> {
    const { orgId, runId, callId } = key
    if (approvalId !== null) {
      const approval = await this.requestApproval(orgId, runId, rootRunId, callId, tool, redact.deep(args), {
        interrupted: true,
        previousApprovalId: approvalId
      })
      return { callId, tool, status: 'pending', content: '', truncated: false, approvalId: approval.id }
    }
    await endAttempt(this.opts.db, key, 'interrupted', INTERRUPTED_CONTENT)
    return this.finish(orgId, runId, {
      callId,
      tool,
      status: 'interrupted',
      content: INTERRUPTED_CONTENT,
      truncated: false,
      approvalId: null
    })
  }

  /** Drops a run's waiting calls (on every instance, through the rows) and stops its running ones here. */
  async cancelRun(orgId: string, runId: string): Promise<number> {
    const cancelled = await cancelPendingApprovals(this.opts.db, orgId, runId)
    for (const flight of this.inFlight.get(`${orgId}/${runId}`) ?? []) flight.controller.abort()
    return cancelled
  }

  // ---- workspaces -----------------------------------------------------------------

  /**
   * The run's session on its thread's workspace, opened once at its first sandbox use: it
   * waits while another instance holds the workspace (a terminal there, or a run's end
   * being saved), saying so once with `workspace.waiting`.
   */
  private async holdWorkspace(
    ref: { orgId: string; runId: string; rootRunId: string },
    signal?: AbortSignal
  ): Promise<void> {
    const workspaces = this.opts.workspaces
    if (!workspaces) return
    const runKey = `${ref.orgId}/${ref.runId}`
    let session = this.workspaceSessions.get(runKey)
    if (!session) {
      session = workspaces.open(
        { orgId: ref.orgId, threadId: ref.rootRunId },
        {
          wait: true,
          signal,
          onWait: () =>
            void this.opts.events
              .emit(ref.orgId, ref.runId, 'workspace.waiting', {
                reason: "the thread's workspace is in use on another instance"
              })
              .catch(() => {})
        }
      )
      this.workspaceSessions.set(runKey, session)
      const opened = session
      opened.catch(() => {
        if (this.workspaceSessions.get(runKey) === opened) this.workspaceSessions.delete(runKey)
      })
    }
    await session
  }

  /**
   * Ends the run's session on its workspace (its end, its wait for people, its hand-back):
   * saves what the run changed and frees the workspace for other instances. Null when all
   * is kept, else the error the run ends with (`workspace_too_large: …`). Never throws.
   */
  async settleWorkspace(orgId: string, runId: string): Promise<string | null> {
    const runKey = `${orgId}/${runId}`
    const session = this.workspaceSessions.get(runKey)
    if (!session) return null
    this.workspaceSessions.delete(runKey)
    const opened = await session.catch(() => null)
    if (!opened) return null
    try {
      return (await opened.close()).error
    } catch (err) {
      this.opts.log.error({ err, runId, orgId }, "ending a run's workspace session failed")
      return "workspace_not_saved: the thread's workspace could not be saved"
    }
  }

  // ---- policies -------------------------------------------------------------------

  /**
   * The built-in tools' policies, then those of the tools the org's MCP servers listed when
   * last reached (default `approve`).
   */
  async policies(
    orgId: string
  ): Promise<Array<{ tool: string; mode: ToolMode; isDefault: boolean; description: string }>> {
    const [rows, mcpTools] = await Promise.all([
      policyRows(this.opts.db, orgId),
      this.opts.mcp ? this.opts.mcp.known(orgId) : []
    ])
    const set = new Map(rows.map((r) => [r.tool, r.mode]))
    const tools = [
      ...TOOL_NAMES.map((tool) => ({
        tool,
        defaultMode: TOOLS[tool].defaultMode,
        description: TOOLS[tool].description
      })),
      ...mcpTools.map((t) => ({ tool: t.name, defaultMode: 'approve' as const, description: t.description }))
    ]
    return tools.map(({ tool, defaultMode, description }) => ({
      tool,
      mode: set.get(tool) ?? defaultMode,
      isDefault: !set.has(tool),
      description
    }))
  }

  /**
   * Sets a tool's policy: a built-in tool, or one an MCP server of the org listed when last
   * reached (any other name is not found).
   */
  async setPolicy(orgId: string, tool: string, mode: ToolMode, userId: string | null): Promise<void> {
    if (
      !isToolName(tool) &&
      !(this.opts.mcp?.isMcpTool(tool) && (await this.opts.mcp.known(orgId)).some((t) => t.name === tool))
    ) {
      throw notFound(
        `no tool named ${tool}: MCP tools are named mcp__<server>__<tool> after one of the organization's servers listed them`
      )
    }
    await setPolicyMode(this.opts.db, orgId, tool, mode, userId)
  }

  private async modeFor(orgId: string, tool: string): Promise<ToolMode> {
    // an MCP server's tool needs a person's approval unless the org said otherwise
    return (await policyMode(this.opts.db, orgId, tool)) ?? (isToolName(tool) ? TOOLS[tool].defaultMode : 'approve')
  }

  // ---- approvals ------------------------------------------------------------------

  async listApprovals(
    orgId: string,
    runId: string,
    page: PageInput
  ): Promise<{ items: ApprovalRow[]; nextCursor: string | null }> {
    return listApprovals(this.opts.db, orgId, runId, page)
  }

  /**
   * A person's decision. Only a pending, unexpired approval of this run in this org can
   * be decided, once: deciding again is a conflict, another org's id is not found.
   */
  async decide(
    orgId: string,
    runId: string,
    approvalId: string,
    decision: 'approve' | 'deny',
    userId: string | null
  ): Promise<ApprovalRow> {
    const status: ApprovalStatus = decision === 'approve' ? 'approved' : 'denied'
    const row = await this.opts.db.transaction(async (tx) => {
      await this.opts.runs.hold(tx, orgId, runId)
      const decided = await decidePending(tx, orgId, runId, approvalId, status, userId)
      if (decided) {
        await this.opts.runs.decided(tx, orgId, runId)
        return decided
      }
      const existing = await getApproval(tx, orgId, runId, approvalId)
      if (!existing) throw notFound('no such approval for this run')
      if (existing.status !== 'pending') throw conflict(`the approval is already ${existing.status}`)
      // past its time: expired now, which lets its run go on (answered as denied)
      await expireApproval(tx, orgId, existing.id)
      await this.opts.runs.decided(tx, orgId, runId)
      return null
    })
    if (!row) throw conflict('the approval has expired')
    await this.opts.events.emit(orgId, runId, 'approval.resolved', {
      approvalId: row.id,
      callId: row.callId,
      tool: row.tool,
      status,
      decidedBy: userId
    })
    return row
  }

  private async requestApproval(
    orgId: string,
    runId: string,
    rootRunId: string,
    callId: string,
    tool: string,
    args: Record<string, unknown>,
    /** a call asked again: it had started with an approval and was interrupted */
    again?: { interrupted: true; previousApprovalId: string }
  ): Promise<ApprovalRow> {
    const row = await insertApproval(this.opts.db, orgId, {
      runId,
      rootRunId,
      callId,
      tool,
      arguments: args,
      expiresAt: new Date(Date.now() + this.opts.approvalTimeoutMs)
    })
    await this.opts.events.emit(orgId, runId, 'approval.requested', {
      approvalId: row.id,
      callId,
      tool,
      arguments: args,
      expiresAt: row.expiresAt.toISOString(),
      ...again
    })
    return row
  }

  // ---- execution ------------------------------------------------------------------

  private async run(
    orgId: string,
    runId: string,
    rootRunId: string,
    tool: string,
    rawArgs: Record<string, unknown>,
    signal: AbortSignal,
    env: Record<string, string> | undefined
  ): Promise<{ ok: boolean; content: string; truncated: boolean; omittedBytes?: number }> {
    try {
      if (!isToolName(tool)) {
        // known() let it through: an MCP server's tool, answered by its server
        const answer = await this.opts.mcp!.call(orgId, tool, rawArgs, signal)
        return { ...answer, truncated: false }
      }
      if (tool === 'memory_search') {
        const args = rawArgs as ToolArgs['memory_search']
        const hits = await this.opts.memory.search({ orgId, runId, rootRunId }, args.query, args.limit ?? 10, args.mode)
        return { ok: true, content: JSON.stringify({ items: hits }), truncated: false }
      }
      if (tool === 'remember') {
        const args = rawArgs as ToolArgs['remember']
        const kept = await this.opts.memory.remember(
          { orgId, runId, rootRunId },
          { content: args.content.trim(), scope: args.scope ?? 'org' }
        )
        if ('refused' in kept) return { ok: false, content: `error: ${kept.refused}`, truncated: false }
        return {
          ok: true,
          content: JSON.stringify({ remembered: true, scope: args.scope ?? 'org', keptThisRun: kept.kept }),
          truncated: false
        }
      }
      if (tool === 'write_artifact') {
        const args = rawArgs as ToolArgs['write_artifact']
        const saved = await this.opts.artifacts.write(
          { orgId, runId, rootRunId },
          { name: args.name, content: args.content, contentType: args.contentType ?? 'text/markdown' }
        )
        return { ok: true, content: JSON.stringify(saved), truncated: false }
      }
      if (tool === 'knowledge_search') {
        const args = rawArgs as ToolArgs['knowledge_search']
        const hits = await this.opts.knowledge.search(
          { orgId, runId, rootRunId },
          args.query,
          args.limit ?? 10,
          args.mode
        )
        return { ok: true, content: JSON.stringify({ items: hits }), truncated: false }
      }
      if (tool === 'propose_knowledge') {
        const args = rawArgs as ToolArgs['propose_knowledge']
        const proposed = await this.opts.knowledge.propose({ orgId, runId, rootRunId }, args)
        return { ok: true, content: JSON.stringify(proposed), truncated: false }
      }
      if (tool === 'propose_skill') {
        const args = rawArgs as ToolArgs['propose_skill']
        const proposed = await this.opts.skills.propose({ orgId, runId, rootRunId }, args)
        return { ok: !('refused' in proposed), content: JSON.stringify(proposed), truncated: false }
      }
      if (!this.opts.sandboxes)
        return {
          ok: false,
          content: `error: sandbox_unavailable: ${this.opts.sandboxUnavailable ?? 'no sandbox provider is configured'}`,
          truncated: false
        }
      await this.holdWorkspace({ orgId, runId, rootRunId }, signal)
      const { sandbox, release } = await this.opts.sandboxes.acquire({ orgId, threadId: rootRunId })
      try {
        switch (tool) {
          case 'shell': {
            const args = rawArgs as ToolArgs['shell']
            const timeoutMs = Math.min(this.opts.execTimeoutMs, (args.timeoutSeconds ?? Infinity) * 1000)
            const r = await sandbox.exec(args.command, {
              timeoutMs,
              maxOutputBytes: this.opts.outputMaxBytes,
              signal,
              env
            })
            const head = r.timedOut
              ? `timed out after ${timeoutMs} ms`
              : r.signal
                ? `killed by ${r.signal}`
                : `exit code ${r.exitCode}`
            const content = `${head}\n${r.stdout}${r.stderr ? `${r.stdout.endsWith('\n') || r.stdout === '' ? '' : '\n'}[stderr]\n${r.stderr}` : ''}`
            return { ok: r.exitCode === 0, content, truncated: r.truncated, omittedBytes: r.omittedBytes ?? 0 }
          }
          case 'read_file': {
            const args = rawArgs as ToolArgs['read_file']
            const r = await sandbox.readFile(args.path, this.opts.outputMaxBytes)
            return {
              ok: true,
              content: r.content,
              truncated: r.truncated,
              omittedBytes: Math.max(0, r.size - Buffer.byteLength(r.content))
            }
          }
          case 'write_file': {
            const args = rawArgs as ToolArgs['write_file']
            const r = await sandbox.writeFile(args.path, args.content)
            return { ok: true, content: `wrote ${r.bytes} bytes to ${args.path}`, truncated: false }
          }
          case 'list_files': {
            const args = rawArgs as ToolArgs['list_files']
            const entries = await sandbox.listFiles(args.path ?? '')
            return { ok: true, content: JSON.stringify({ entries }), truncated: false }
          }
        }
      } finally {
        release()
      }
    } catch (err) {
      if (err instanceof SandboxError) return { ok: false, content: `error: ${err.message}`, truncated: false }
      this.opts.log.error({ err, tool }, 'tool call failed')
      return { ok: false, content: 'error: the tool failed', truncated: false }
    }
  }

  private async finish(orgId: string, runId: string, result: ToolResult): Promise<ToolResult> {
    await this.opts.events.emit(orgId, runId, 'tool.result', { ...result })
    return result
  }
}

function parseArguments(raw: string | Record<string, unknown>): Record<string, unknown> | null {
  let value: unknown = raw
  if (typeof raw === 'string') {
    try {
      value = raw.trim() === '' ? {} : JSON.parse(raw)
    } catch {
      return null
    }
  }
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : null
}

function firstError(tool: ToolName, args: Record<string, unknown>): string | null {
  const schema = TOOLS[tool].schema
  if (Value.Check(schema, args)) return null
  const [first] = Value.Errors(schema, args)
  return first ? `invalid arguments: ${first.instancePath || '/'} ${first.message}` : 'invalid arguments'
}

/**
 * Cuts a tool's output to at most `max` UTF-8 bytes, on a character boundary. Output that
 * was cut (here, or `omitted` bytes already dropped where it was produced) ends with a line
 * the model can read, `[output truncated: N of M bytes]` (N shown of M produced), within
 * `max` too, so that the model knows it did not see everything and how much it missed.
 */
export function bound(text: string, max: number, omitted = 0): { text: string; truncated: boolean } {
  const bytes = Buffer.from(text, 'utf8')
  if (bytes.length <= max && omitted <= 0) return { text, truncated: false }
  const total = bytes.length + omitted
  const marker = (shown: number) => `\n[output truncated: ${shown} of ${total} bytes]`
  // room for the longest marker this cut can need, then back over UTF-8 continuation bytes
  let end = Math.max(0, Math.min(bytes.length, max - Buffer.byteLength(marker(bytes.length))))
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--
  return { text: bytes.subarray(0, end).toString('utf8') + marker(end), truncated: true }
}

/** The model's answer for a call that did not run: denied, expired without a decision, or cancelled with its run. */
function deniedContent(status: ApprovalStatus): string {
  return status === 'cancelled' ? 'the run was cancelled' : status === 'expired' ? EXPIRED_CONTENT : DENIED_CONTENT
}
