import { Type } from 'typebox'
import { Cursor, Id, IsoDate, named, Nullable, StrictObject } from './common.js'
import { EmbeddingItemState, SearchModeParam, SearchModeUsed, SearchScores } from './retrieval.js'

/** Any string: an invalid value falls back to `org`, so it is never a 400. */
const ScopeParam = Type.Optional(
  Type.String({ maxLength: 64, description: '`org` (default) or `personal`; anything else means `org`' })
)
const Scope = Type.Union([Type.Literal('org'), Type.Literal('personal')])

export const ScopeQuery = StrictObject({ scope: ScopeParam })

export const SearchQuery = StrictObject({
  scope: ScopeParam,
  q: Type.Optional(Type.String({ maxLength: 2000, description: 'the query; empty returns no items' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, description: 'default 20, at most 100 (larger values are capped)' })),
  mode: SearchModeParam
})

export const BrowseQuery = StrictObject({
  scope: ScopeParam,
  limit: Type.Optional(Type.Integer({ minimum: 1, description: 'default 50, at most 200 (larger values are capped)' })),
  cursor: Type.Optional(Cursor)
})

export const SearchItem = named(
  'MemorySearchItem',
  Type.Object({
    id: Type.String(),
    content: Type.String(),
    sourceScope: Scope,
    score: Type.Number({ description: 'the ranking score of the mode used (hybrid: the fused one)' }),
    scores: SearchScores,
    embedding: Type.Optional(EmbeddingItemState),
    citation: Type.Object({
      kind: Type.Literal('memory'),
      id: Type.String(),
      runId: Nullable(Type.String()),
      rootRunId: Nullable(Type.String()),
      createdAt: IsoDate
    })
  })
)

export const SearchResponse = named(
  'MemorySearchResult',
  Type.Object({
    enabled: Type.Boolean(),
    scope: Scope,
    authed: Type.Boolean(),
    truncated: Type.Boolean(),
    mode: SearchModeUsed,
    latencyMs: Type.Number(),
    failedClosed: Type.Optional(Type.Literal(true)),
    items: Type.Array(SearchItem)
  })
)

export const BrowseItem = named(
  'MemoryItem',
  Type.Object({
    id: Type.String(),
    content: Type.String(),
    background: Type.Boolean(),
    sourceScope: Scope,
    sourceRunId: Nullable(Type.String()),
    embedding: Type.Optional(EmbeddingItemState),
    embeddingError: Type.Optional(
      Nullable(Type.String({ description: 'why the embedding failed (set with embedding: failed)' }))
    ),
    createdAt: IsoDate,
    updatedAt: IsoDate
  })
)

export const BrowseResponse = named(
  'MemoryBrowseResult',
  Type.Object({
    enabled: Type.Boolean(),
    scope: Scope,
    authed: Type.Boolean(),
    total: Type.Integer(),
    latencyMs: Type.Number(),
    failedClosed: Type.Optional(Type.Literal(true)),
    items: Type.Array(BrowseItem),
    nextCursor: Nullable(Type.String())
  })
)

export const ItemParams = StrictObject({ id: Id })

export const PatchBody = named(
  'MemoryPatchRequest',
  StrictObject({
    scope: ScopeParam,
    content: Type.String({ minLength: 1, maxLength: 4000, pattern: '\\S', description: 'the corrected fact' }),
    background: Type.Optional(
      Type.Boolean({ default: false, description: 'true: accepted once validated, applied asynchronously' })
    )
  })
)

export const Ok = named('Ok', Type.Object({ ok: Type.Literal(true) }))
export const DeleteResponse = named(
  'MemoryDeleteResult',
  Type.Object({ ok: Type.Literal(true), deletedCount: Type.Integer() })
)

export const HistoryResponse = named(
  'MemoryHistory',
  Type.Object({
    history: Type.Array(
      Type.Object({
        content: Type.String(),
        changedBy: Type.String({
          description: 'who made the change: a user id, `run:<run id>`, `api-key:<key id>` or `dev`'
        }),
        changedByName: Type.String({
          description:
            "who made the change as people read it: the person's name (else email), `an API key`, `a run` or `the dev organization`"
        }),
        changedAt: IsoDate,
        kind: Type.Union([Type.Literal('created'), Type.Literal('updated'), Type.Literal('deleted')])
      })
    )
  })
)

/** The states of a run's capture the outbox filters by. */
export const CaptureStateName = Type.Union([
  Type.Literal('pending'),
  Type.Literal('delivering'),
  Type.Literal('delivered'),
  Type.Literal('dead'),
  Type.Literal('discarded')
])

export const CapturesQuery = StrictObject({
  scope: ScopeParam,
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
  cursor: Type.Optional(Cursor),
  state: Type.Optional(CaptureStateName)
})

export const Capture = named(
  'Capture',
  Type.Object({
    runId: Type.String(),
    rootRunId: Type.String(),
    state: Type.String(),
    attempts: Type.Integer(),
    maxAttempts: Type.Integer(),
    lastError: Nullable(Type.String()),
    itemCount: Type.Integer(),
    addedCount: Nullable(
      Type.Integer({
        description:
          'once delivered: the facts the pool took as new (null before, and for the http backend, which merges on its own)'
      })
    ),
    mergedCount: Nullable(
      Type.Integer({ description: 'once delivered: the facts the pool already held, not stored twice' })
    ),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    nextAttemptAt: IsoDate,
    deliveredAt: Nullable(IsoDate),
    orphan: Type.Optional(Type.Literal(true))
  })
)

export const CapturesResponse = named(
  'CaptureList',
  Type.Object({ captures: Type.Array(Capture), nextCursor: Nullable(Type.String()) })
)

export const RunParams = StrictObject({ runId: Id })

export const ResolveBody = named(
  'CaptureResolveRequest',
  StrictObject({
    resolution: Type.Union([Type.Literal('delivered'), Type.Literal('discard')])
  })
)

export const RecallsQuery = StrictObject({
  scope: ScopeParam,
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
  cursor: Type.Optional(Cursor),
  runId: Type.Optional(Id),
  rootRunId: Type.Optional(Id)
})

export const Recall = named(
  'RecallFrame',
  Type.Object({
    id: Type.String(),
    runId: Type.String(),
    rootRunId: Type.String(),
    scope: Scope,
    query: Type.String(),
    itemIds: Type.Array(Type.String()),
    latencyMs: Type.Integer(),
    mode: SearchModeUsed,
    createdAt: IsoDate,
    session: Type.Object({ runId: Type.String(), rootRunId: Type.String() })
  })
)

export const RecallsResponse = named(
  'RecallList',
  Type.Object({ recalls: Type.Array(Recall), nextCursor: Nullable(Type.String()) })
)

export const Settings = named(
  'MemorySettings',
  Type.Object({
    enabled: Type.Boolean({ description: 'memory is on for this org (and the service has a backend)' }),
    extract: Type.Boolean({
      description:
        'after a run succeeds, its model is asked once for the durable facts of the exchange, which join its capture'
    }),
    orgEnabled: Type.Boolean({ description: 'the org switch alone' }),
    backend: Type.Union([Type.Literal('postgres'), Type.Literal('http'), Type.Literal('off')])
  })
)
export const SettingsBody = named(
  'MemorySettingsRequest',
  StrictObject({
    enabled: Type.Boolean(),
    extract: Type.Optional(
      Type.Boolean({ description: 'extract facts from succeeded runs (default false; absent: unchanged)' })
    )
  })
)
export const AddItemBody = named(
  'MemoryAddRequest',
  StrictObject({
    scope: Type.Optional(
      Type.String({
        maxLength: 64,
        description:
          '`org` (default) or `personal`; anything else is refused (a typo must never put a personal note in the shared pool)'
      })
    ),
    content: Type.String({ minLength: 1, maxLength: 4000, pattern: '\\S', description: 'the fact' })
  })
)
export const AddItemResponse = named('MemoryAddResult', Type.Object({ item: BrowseItem }))
export const EmbedResponse = named(
  'MemoryEmbedResult',
  Type.Object({ ok: Type.Literal(true), embedding: EmbeddingItemState })
)

/**
 * The Memory Hub's own refusals. Their `error` is the exact sentence the spec gives
 * (`not found in this pool`, `sign-in required`, ...; `delete failed` in the style of its
 * `update failed`), not a snake_case identifier like the other routes' errors: clients
 * written against the spec match on those sentences, so the document says so.
 */
const SENTENCES = {
  signIn: '`sign-in required` (personal scope without a signed-in user: the dev org or an API key)',
  disabled: '`memory disabled` (memory is off for the organization, or no memory backend is configured)',
  notInPool: '`not found in this pool` (no item with this id in the chosen pool)',
  updateFailed: '`update failed` (the memory backend did not accept the change)',
  deleteFailed: '`delete failed` (the memory backend did not accept the delete; worded like `update failed`)',
  noDead: '`no dead capture for this run in your org`',
  noOrphan: '`no delivering orphan for this run in your org`'
} as const

function sentenceError(status: number, sentences: ReadonlyArray<keyof typeof SENTENCES>, others: string) {
  const listed = sentences.map((s) => SENTENCES[s]).join(', or ')
  return {
    [status]: Type.Ref('ErrorBody', {
      description: `\`error\` is a sentence, not an identifier, exactly as the HTTP API spec words it (clients match on it): ${listed}; ${others}`
    })
  }
}

const OTHER_403 = 'otherwise the identifiers every route can answer (`no_organization`, `user_required`, ...)'
const OTHER_404 = 'otherwise `not_found`'

/** The sentence refusals of each memory route, to spread over `errorResponses(...)`. */
export const MemoryRefusals = {
  add: sentenceError(403, ['signIn', 'disabled'], OTHER_403),
  update: {
    ...sentenceError(403, ['signIn', 'disabled'], OTHER_403),
    ...sentenceError(404, ['notInPool'], OTHER_404),
    ...sentenceError(502, ['updateFailed'], 'or `upstream_failed` when the backend cannot be reached')
  },
  remove: {
    ...sentenceError(403, ['signIn', 'disabled'], OTHER_403),
    ...sentenceError(404, ['notInPool'], OTHER_404),
    ...sentenceError(502, ['deleteFailed'], 'or `upstream_failed` when the backend cannot be reached')
  },
  history: { ...sentenceError(403, ['signIn'], OTHER_403), ...sentenceError(404, ['notInPool'], OTHER_404) },
  embed: {
    ...sentenceError(403, ['signIn', 'disabled'], OTHER_403),
    ...sentenceError(404, ['notInPool'], OTHER_404)
  },
  retry: sentenceError(404, ['noDead'], OTHER_404),
  resolve: sentenceError(404, ['noOrphan'], OTHER_404)
}
