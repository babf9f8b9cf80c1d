import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import playbooksRoutes from './playbooks-routes.js'
import skillProposalsRoutes from './skill-proposals-routes.js'
import skillsRoutes from './skills-routes.js'

/** Skills, skill runs, proposals and playbooks: one plugin per URL family. */
const skillsGroup: FastifyPluginAsyncTypebox = async (app) => {
  await app.register(skillsRoutes)
  await app.register(skillProposalsRoutes)
  await app.register(playbooksRoutes)
}

export default fp(skillsGroup, {
  name: 'skills-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'idempotency', 'runs', 'skills'],
  encapsulate: true
})
