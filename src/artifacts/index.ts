import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import artifactProposalsRoutes from './artifact-proposals-routes.js'
import artifactVersionsRoutes from './artifact-versions-routes.js'
import artifactsRoutes from './artifacts-routes.js'
import uploadsRoutes from './uploads-routes.js'

/** Uploads, artifacts, their versions and proposals: one plugin per URL family. */
const artifactsGroup: FastifyPluginAsyncTypebox = async (app) => {
  await app.register(uploadsRoutes)
  await app.register(artifactsRoutes)
  await app.register(artifactVersionsRoutes)
  await app.register(artifactProposalsRoutes)
}

export default fp(artifactsGroup, {
  name: 'artifacts-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'artifacts'],
  encapsulate: true
})
