import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses } from '../../schemas/common.js'
import { SearchQuery, SearchResult } from '../../schemas/knowledge.js'
import { principalOf } from '../auth/principal.js'

const TAGS = ['knowledge']

/** Search over records and document chunks: /knowledge/search. */
const searchRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/knowledge/search',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'searchKnowledge',
        tags: TAGS,
        summary: 'Records and document chunks in one ranked list (web search syntax: "phrase", or, -word)',
        description:
          'Searches records and extracted document chunks by their words and their meaning (fused by reciprocal rank, or one of the two with `mode`) and returns one ranked list of hits, each with a snippet whose matches are marked.',
        querystring: SearchQuery,
        response: { 200: SearchResult, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const started = performance.now()
      const outcome = await app.knowledge.search(orgId, {
        q: request.query.q,
        tag: request.query.tag,
        limit: request.query.limit ?? 10,
        mode: request.query.mode
      })
      return { ...outcome, latencyMs: Math.round((performance.now() - started) * 100) / 100 }
    }
  )
}

export default searchRoutes
