import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses } from '../../schemas/common.js'
import { Dashboard, UsageQuery, UsageReport } from '../../schemas/platform.js'
import { principalOf } from '../auth/principal.js'
import { dashboard } from './dashboard.js'
import { parseUsageQuery, usageReport } from './usage.js'

const PLATFORM = ['platform']

/** The org at a glance, and fleet usage from the rollup kept as runs finish. */
const platformRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/dashboard',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getDashboard',
        tags: PLATFORM,
        summary: 'The org at a glance: runs, memory, knowledge, automations and the newest changes',
        description:
          "Gathers the organization's figures in one answer: runs by status and in the last day, active runs, memory, knowledge, automations and the latest changes.",
        response: { 200: Dashboard, ...errorResponses() }
      }
    },
    async (request) => dashboard(app.db, principalOf(request).orgId, new Date())
  )

  app.get(
    '/usage',
    {
      config: { scope: 'admin', keyAccess: 'none' },
      schema: {
        operationId: 'getUsage',
        tags: PLATFORM,
        summary:
          'Fleet usage per local day of `tz` (admin): runs, outcomes, tokens and time, zero-filled, optionally grouped',
        description:
          'Reports runs, outcomes, tokens and run time per local day of a time zone, zero-filled, optionally grouped; only admins may.',
        querystring: UsageQuery,
        response: { 200: UsageReport, ...errorResponses() }
      }
    },
    async (request) => usageReport(app.db, principalOf(request).orgId, parseUsageQuery(request.query, new Date()))
  )
}

export default platformRoutes
