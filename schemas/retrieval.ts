import { Type } from 'typebox'
import { LiteralUnion, named, Nullable, StrictObject } from './common.js'

/** How a search ranks: by words and meaning fused, by meaning, or by words. */
export const SEARCH_MODES = ['hybrid', 'semantic', 'fulltext'] as const
export const SearchModeParam = Type.Optional(
  LiteralUnion(SEARCH_MODES, {
    description:
      'hybrid (default where vectors exist): full text and meaning fused by reciprocal rank; semantic: meaning only; fulltext: words only'
  })
)
export const SearchModeUsed = LiteralUnion(SEARCH_MODES, {
  description: 'how this search ranked: fulltext where the database has no vectors or the query could not be embedded'
})

export const SearchScores = named(
  'SearchScores',
  Type.Object(
    {
      fulltext: Nullable(Type.Number({ description: 'the full-text score; null when the words did not match' })),
      semantic: Nullable(
        Type.Number({ description: 'the cosine similarity of the meaning; null when not found (or not yet embedded)' })
      ),
      fused: Type.Number({ description: 'the reciprocal rank fusion (k = 60) of the two rankings' })
    },
    { description: 'why an item matched: by words, by meaning, or both' }
  )
)

export const EMBEDDING_ITEM_STATES = ['pending', 'ready', 'failed'] as const
export const EmbeddingItemState = LiteralUnion(EMBEDDING_ITEM_STATES, {
  description: 'its vector: pending (being made; found by words meanwhile), ready, failed (embeddingError says why)'
})

export const EMBEDDING_SOURCES = ['org', 'deployment', 'builtin'] as const
export const EmbeddingModelInfo = named(
  'EmbeddingModel',
  Type.Object({
    model: Type.String({ description: "the model texts are embedded with (the built-in's is cairn-glove-100d-v1)" }),
    source: LiteralUnion(EMBEDDING_SOURCES, {
      description:
        "org: an admin chose it among the org's providers'; deployment: the server's EMBEDDING_MODEL; builtin: the offline embedder"
    }),
    dimensions: Nullable(
      Type.Integer({ description: 'the size of its vectors; null until the first text is embedded' })
    )
  })
)
export const SetEmbeddingModelBody = named(
  'SetEmbeddingModelRequest',
  StrictObject({
    model: Nullable(
      Type.String({
        minLength: 1,
        maxLength: 200,
        description:
          "an embedding model of one of the org's ready providers, the deployment's, or the built-in one; null forgets the choice"
      })
    )
  })
)
