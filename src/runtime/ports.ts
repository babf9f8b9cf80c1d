/**
 * The seams between the agent runtime and the runs group. The runtime never reads the
 * runs tables itself: it asks these ports. The runs group provides them at wiring time
 * (`buildApp({ runtime: { runs, events, memory } })`); until then the defaults below
 * make every run unknown (404) and drop events.
 */

/** Which thread a run belongs to, always inside one org. */
export interface RunDirectory {
  /** the run's thread (its root run id), or null when the run is not in this org */
  threadOfRun(orgId: string, runId: string): Promise<{ rootRunId: string } | null>
  /** whether a thread (a root run id) exists in this org */
  threadExists(orgId: string, rootRunId: string): Promise<boolean>
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
}

/** What the `memory_search` tool calls (the runs group wires it to `RunMemory.recall`). */
export interface MemorySearch {
  search(run: ToolRunRef, query: string, limit: number): Promise<MemoryHit[]>
}

/** What the `knowledge_search` and `propose_knowledge` tools call (the knowledge group, through the runs group). */
export interface KnowledgeTools {
  search(run: ToolRunRef, query: string, limit: number): Promise<Array<{ kind: string; id: string; title: string; snippet: string; score: number }>>
  propose(run: ToolRunRef, draft: { title: string; body: string; tags?: string[] | undefined; targetRecordId?: string | undefined }): Promise<{ draftId: string; title: string }>
}

/** What the `propose_skill` tool calls (the skills group, through the runs group). */
export interface SkillTools {
  propose(run: ToolRunRef, proposal: { skillMd: string; skillId?: string | undefined }): Promise<{ proposalId: string; state: 'open' } | { refused: string }>
}

/** What the `write_artifact` tool calls (the runs group wires it to the artifacts group and announces `artifact.created`). */
export interface ArtifactWriter {
  write(run: ToolRunRef, file: { name: string; content: string; contentType: string }): Promise<{ artifactId: string; name: string; version: number }>
}
