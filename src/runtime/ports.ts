/**
 * What the agent runtime (sandboxes, the tool gateway, thread workspaces) needs of other
 * groups, as interfaces it owns: the runs group's RunDirectory and RunEventWriter, the tools
 * runs get from memory, knowledge, skills and artifacts (adapted for the runtime in
 * src/runs/ports/runtime.ts), the artifacts group's WorkspaceArchives and the mcp group's
 * McpToolSource. The runtime reads no other group's tables; src/app.ts wires these, and
 * tests replace any of them through `buildTestApp(t, { runtime })`.
 */
import type { Readable } from 'node:stream'
import type { Tx } from '../db/client.js'

/** Which thread a run belongs to, always inside one org. */
export interface RunDirectory {
  /**
   * the run's thread (its root run id) and the person who started it (null: an API key, an
   * automation or a chat platform did), or null when the run is not in this org
   */
  threadOfRun(orgId: string, runId: string): Promise<{ rootRunId: string; userId: string | null } | null>
  /** whether a thread (a root run id) exists in this org */
  threadExists(orgId: string, rootRunId: string): Promise<boolean>
  /** which of these threads still exist, as `<org>/<thread>` (the workspace sweeper drops the others' workspaces) */
  existingThreads(keys: Array<{ orgId: string; threadId: string }>): Promise<Set<string>>
  /**
   * Around a decision on one of the run's approvals, in the decision's transaction:
   * `hold` locks the run row first, `decided` then lets a run waiting for people go on at
   * once when none of its approvals is pending any more. Decisions on two
   * of its calls at the same moment cannot both miss that they were the last.
   */
  hold(tx: Tx, orgId: string, runId: string): Promise<void>
  decided(tx: Tx, orgId: string, runId: string): Promise<void>
}

/** Stores (then streams) one run event: `tool.call`, `tool.result`, `approval.requested`, `approval.resolved`. */
export interface RunEventWriter {
  emit(orgId: string, runId: string, type: string, data: Record<string, unknown>): Promise<void>
}

/** The run a tool call is made for. */
export interface ToolRunRef {
  orgId: string
  runId: string
  rootRunId: string
}

export interface MemoryHit {
  id: string
  content: string
  score: number
  /** why it matched: by words, by meaning, or both */
  scores?: { fulltext: number | null; semantic: number | null; fused: number } | undefined
}

type SearchMode = 'hybrid' | 'semantic' | 'fulltext'

/**
 * What the memory tools call: `memory_search` (the runs group wires it to `RunMemory.recall`)
 * and `remember`, which keeps a fact on the run until it ends (then it is captured), or
 * answers why not (`refused`).
 */
export interface MemoryTools {
  search(run: ToolRunRef, query: string, limit: number, mode?: SearchMode | undefined): Promise<MemoryHit[]>
  remember(
    run: ToolRunRef,
    fact: { content: string; scope: 'org' | 'personal' }
  ): Promise<{ kept: number } | { refused: string }>
}

/** What the `knowledge_search` and `propose_knowledge` tools call (the knowledge group, through the runs group). */
export interface KnowledgeTools {
  search(
    run: ToolRunRef,
    query: string,
    limit: number,
    mode?: SearchMode | undefined
  ): Promise<Array<{ kind: string; id: string; title: string; snippet: string; score: number }>>
  propose(
    run: ToolRunRef,
    draft: { title: string; body: string; tags?: string[] | undefined; targetRecordId?: string | undefined }
  ): Promise<{ draftId: string; title: string }>
}

/** What the `propose_skill` tool calls (the skills group, through the runs group). */
export interface SkillTools {
  propose(
    run: ToolRunRef,
    proposal: { skillMd: string; skillId?: string | undefined }
  ): Promise<{ proposalId: string; state: 'open' } | { refused: string }>
}

/**
 * What the `write_artifact` tool calls (the runs group wires it to the artifacts group and announces
 * `artifact.created`).
 */
export interface ArtifactWriter {
  write(
    run: ToolRunRef,
    file: { name: string; content: string; contentType: string }
  ): Promise<{ artifactId: string; name: string; version: number }>
}

/**
 * Where thread workspace archives are kept (the artifacts group's blob store): blobs of
 * the org, pinned when put until `reference` names them in the transaction that points a
 * `thread_workspaces` row at them; the blob sweeper removes those no row names any more.
 */
export interface WorkspaceArchives {
  /** stores the archive; more than `maxBytes` throws and keeps nothing */
  put(orgId: string, body: Readable, maxBytes: number): Promise<{ sha256: string; size: number }>
  reference(tx: Tx, orgId: string, sha256: string): Promise<void>
  read(orgId: string, sha256: string): Promise<Readable>
}

/**
 * The org's MCP servers as the gateway sees them (the mcp group): tools named
 * `mcp__<server>__<tool>`, listed per org when a run starts, called on their server.
 */
export interface McpToolSource {
  isMcpTool(name: string): boolean
  definitions(
    orgId: string
  ): Promise<
    Array<{ type: 'function'; function: { name: string; description: string; parameters: Record<string, unknown> } }>
  >
  call(
    orgId: string,
    name: string,
    args: Record<string, unknown>,
    signal: AbortSignal
  ): Promise<{ ok: boolean; content: string }>
  /** the tools the org's servers listed when last reached (stored; no connection is made) */
  known(orgId: string): Promise<Array<{ name: string; description: string }>>
}

/**
 * Why a run's signal aborts when the run leaves its worker to go on elsewhere (its instance
 * stops and hands it back): a call running then is interrupted, not cancelled. Nothing is
 * recorded as its end, so wherever the run goes on the call is found started and never ended.
 */
export class RunHandedBack extends Error {
  override name = 'RunHandedBack'
}
