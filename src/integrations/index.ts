import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses } from '../../schemas/common.js'
import { IntegrationList } from '../../schemas/integrations.js'
import { principalOf } from '../auth/principal.js'
import { listIntegrations } from './integrations-repo.js'

const INTEGRATIONS = ['integrations']

/**
 * The org's integrations. Reading is an org route; connecting and
 * disconnecting (each kind's own plugin) are admin routes.
 */
const integrationsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/integrations',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listIntegrations',
        tags: INTEGRATIONS,
        summary: 'Every integration kind and whether the org has connected it',
        description: 'Lists every kind of integration (GitHub, Slack) and whether the organization has connected it.',
        response: { 200: IntegrationList, ...errorResponses() }
      }
    },
    async (request) => ({ items: await listIntegrations(app.db, principalOf(request).orgId) })
  )
}

export default integrationsRoutes
