import { Type } from 'typebox'
import { SearchModeParam, SearchModeUsed, SearchScores } from './retrieval.js'
import {
  CreatedBy,
  Id,
  IdParams,
  IsoDate,
  LiteralUnion,
  named,
  Nullable,
  Page,
  PageQuery,
  StrictObject
} from './common.js'

export const DOCUMENT_STATES = ['queued', 'processing', 'ready', 'failed'] as const
export const DRAFT_STATES = ['open', 'approved', 'rejected'] as const
export const HISTORY_KINDS = ['created', 'updated', 'deleted'] as const
export const SEARCH_HIT_KINDS = ['record', 'chunk'] as const

/** A tag as people write them: no control characters, no surrounding blanks. */
const Tag = Type.String({
  minLength: 1,
  maxLength: 64,
  pattern: '^[^\\u0000-\\u001f\\u007f\\s](?:[^\\u0000-\\u001f\\u007f]*[^\\u0000-\\u001f\\u007f\\s])?$'
})
const Tags = Type.Array(Tag, {
  maxItems: 32,
  description: 'labels (a repeated one is kept once); `GET /api/knowledge?tag=` filters on one'
})
const Title = Type.String({ minLength: 1, maxLength: 300, pattern: '\\S' })
const Body = Type.String({ maxLength: 1_000_000, description: 'Markdown' })

export const RecordSource = named(
  'KnowledgeRecordSource',
  Type.Union([
    Type.Object({ kind: Type.Literal('manual') }),
    Type.Object({ kind: Type.Literal('draft'), draftId: Type.String(), runId: Nullable(Type.String()) }),
    Type.Object({
      kind: Type.Literal('wiki'),
      repo: Type.String(),
      commit: Type.String(),
      path: Type.String(),
      citedFiles: Type.Array(Type.String())
    })
  ])
)

export const KnowledgeRecord = named(
  'KnowledgeRecord',
  Type.Object({
    id: Type.String(),
    title: Type.String(),
    body: Type.String(),
    tags: Type.Array(Type.String()),
    source: RecordSource,
    version: Type.Integer({ minimum: 1 }),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)

export const HistoryKind = LiteralUnion(HISTORY_KINDS)
export const RecordHistoryEntry = named(
  'KnowledgeHistoryEntry',
  Type.Object({
    version: Type.Integer({ minimum: 1 }),
    title: Type.String(),
    body: Type.String(),
    changedBy: Nullable(
      Type.String({ description: 'the user who made the change; null for a key, the dev org or a run' })
    ),
    changedAt: IsoDate,
    kind: HistoryKind
  })
)

export const SearchHit = named(
  'KnowledgeSearchHit',
  Type.Object({
    kind: LiteralUnion(SEARCH_HIT_KINDS),
    id: Type.String({ description: 'the record id, or the chunk id' }),
    recordId: Nullable(Type.String()),
    documentId: Nullable(Type.String()),
    title: Type.String({ description: 'the record title, or the document name and the chunk heading' }),
    snippet: Type.String({ description: 'HTML-escaped text; matches in <mark>…</mark>' }),
    score: Type.Number({ description: 'the ranking score of the mode used (hybrid: the fused one)' }),
    scores: SearchScores
  })
)

export const DocumentState = LiteralUnion(DOCUMENT_STATES)
export const KnowledgeDocument = named(
  'KnowledgeDocument',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    contentType: Type.String(),
    size: Type.Integer(),
    sha256: Type.String(),
    state: DocumentState,
    chunkCount: Type.Integer(),
    attempts: Type.Integer(),
    lastError: Nullable(
      Type.String({ description: 'why the last attempt failed, as a sentence; null once it is ready' })
    ),
    nextAttemptAt: IsoDate,
    createdAt: IsoDate,
    updatedAt: IsoDate
  })
)

export const DocumentChunk = named(
  'KnowledgeChunk',
  Type.Object({
    index: Type.Integer({ minimum: 0 }),
    heading: Type.String({ description: 'the heading path, joined by " > "' }),
    text: Type.String()
  })
)

export const DraftState = LiteralUnion(DRAFT_STATES)
export const KnowledgeDraft = named(
  'KnowledgeDraft',
  Type.Object({
    id: Type.String(),
    title: Type.String(),
    body: Type.String(),
    tags: Type.Array(Type.String()),
    targetRecordId: Nullable(Type.String()),
    state: DraftState,
    runId: Nullable(Type.String()),
    createdAt: IsoDate,
    createdBy: CreatedBy,
    decidedAt: Nullable(IsoDate),
    decidedBy: Nullable(Type.String())
  })
)

export const RecordEnvelope = named('KnowledgeRecordEnvelope', Type.Object({ record: KnowledgeRecord }))
export const RecordPage = named('KnowledgeRecordPage', Page(KnowledgeRecord))
export const RecordHistory = named('KnowledgeHistory', Type.Object({ history: Type.Array(RecordHistoryEntry) }))
export const SearchResult = named(
  'KnowledgeSearchResult',
  Type.Object({
    items: Type.Array(SearchHit),
    truncated: Type.Boolean({ description: 'more matched than `limit`' }),
    mode: SearchModeUsed,
    latencyMs: Type.Number()
  })
)
export const DocumentEnvelope = named('KnowledgeDocumentEnvelope', Type.Object({ document: KnowledgeDocument }))
export const DocumentPage = named('KnowledgeDocumentPage', Page(KnowledgeDocument))
export const ChunkList = named('KnowledgeChunkList', Type.Object({ items: Type.Array(DocumentChunk) }))
export const DraftEnvelope = named('KnowledgeDraftEnvelope', Type.Object({ draft: KnowledgeDraft }))
export const DraftPage = named('KnowledgeDraftPage', Page(KnowledgeDraft))
export const ApprovedDraft = named(
  'KnowledgeApprovedDraft',
  Type.Object({ draft: KnowledgeDraft, record: KnowledgeRecord })
)

export const CreateRecordBody = named(
  'CreateKnowledgeRecordRequest',
  StrictObject({ title: Title, body: Body, tags: Type.Optional(Tags) })
)
export const UpdateRecordBody = named(
  'UpdateKnowledgeRecordRequest',
  StrictObject({
    title: Type.Optional(Title),
    body: Type.Optional(Body),
    tags: Type.Optional(Tags),
    version: Type.Integer({
      minimum: 1,
      maximum: 2_147_483_647,
      description: 'the version this change is based on; a stale one is 409'
    })
  })
)
export const CreateDraftBody = named(
  'CreateKnowledgeDraftRequest',
  StrictObject({
    title: Title,
    body: Body,
    tags: Type.Optional(Tags),
    targetRecordId: Type.Optional(Id)
  })
)
export const ApproveDraftBody = named(
  'ApproveKnowledgeDraftRequest',
  StrictObject({
    title: Type.Optional(Title),
    body: Type.Optional(Body),
    tags: Type.Optional(Tags)
  })
)
/** `POST /api/knowledge/documents`: one multipart field `file` (documented; the body is read as a stream). */
export const DocumentUploadBody = named(
  'KnowledgeDocumentUploadRequest',
  Type.Object({
    file: Type.String({
      format: 'binary',
      contentMediaType: 'application/octet-stream',
      description: 'a PDF, DOCX, HTML, Markdown or plain-text file'
    })
  })
)

export { IdParams }
export const ListRecordsQuery = StrictObject({ ...PageQuery, tag: Type.Optional(Tag) })
export const SearchQuery = StrictObject({
  q: Type.String({
    minLength: 1,
    maxLength: 500,
    description: 'a web search query: words, "quoted phrases", or, -excluded'
  }),
  tag: Type.Optional(Tag),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 10 })),
  mode: SearchModeParam
})
export const ListDocumentsQuery = StrictObject({ ...PageQuery, state: Type.Optional(DocumentState) })
export const ListDraftsQuery = StrictObject({ ...PageQuery, state: Type.Optional(DraftState) })
