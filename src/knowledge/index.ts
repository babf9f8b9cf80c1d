import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import documentsRoutes from './documents-routes.js'
import draftsRoutes from './drafts-routes.js'
import recordsRoutes from './records-routes.js'
import searchRoutes from './search-routes.js'

/** Knowledge records, search, documents and drafts: one plugin per URL family. */
const knowledgeRoutes: FastifyPluginAsyncTypebox = async (app) => {
  // a record written here is embedded soon (it waits in the embedding job's queue from the write's own statement)
  app.addHook('onResponse', async (request, reply) => {
    if (request.method !== 'GET' && reply.statusCode < 300) app.retrieval.worker?.wake()
  })
  await app.register(recordsRoutes)
  await app.register(searchRoutes)
  await app.register(documentsRoutes)
  await app.register(draftsRoutes)
}

// its own scope (the hook above is the group's alone), started only where the services it uses are
export default fp(knowledgeRoutes, {
  name: 'knowledge-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'retrieval', 'knowledge'],
  encapsulate: true
})
