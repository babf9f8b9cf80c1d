/**
 * The seam between runs and the knowledge group: what a run proposes (the echo engine's
 * `learn:` lines, the `propose_knowledge` tool) and what it searches (`knowledge_search`).
 * The knowledge group implements it.
 */

/** The run a draft is proposed by, or a search is made for. */
export interface KnowledgeRunRef {
  orgId: string
  runId: string
  rootRunId: string
}

export interface ProposedDraft {
  draftId: string
  title: string
}

export interface KnowledgeFinding {
  kind: 'record' | 'chunk'
  id: string
  recordId: string | null
  documentId: string | null
  title: string
  /** plain text (no HTML) */
  snippet: string
  score: number
}

export interface RunKnowledge {
  /** An open draft in the learning lane, made by the run. */
  propose(
    run: KnowledgeRunRef,
    draft: { title: string; body: string; tags?: string[] | undefined; targetRecordId?: string | undefined }
  ): Promise<ProposedDraft>
  /** The org's knowledge search (records and document chunks), ranked as `mode` says (default hybrid). */
  search(
    run: KnowledgeRunRef,
    query: string,
    limit: number,
    mode?: 'hybrid' | 'semantic' | 'fulltext' | undefined
  ): Promise<KnowledgeFinding[]>
}
