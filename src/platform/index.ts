import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses } from '../../schemas/common.js'
import { Dashboard, UsageQuery, UsageReport } from '../../schemas/platform.js'
import { principalOf } from '../auth/principal.js'
import { dashboard } from './dashboard.js'
import { parseUsageQuery, usageReport } from './usage.js'

const PLATFORM = ['platform']

/** Contract 11: the org at a glance, and fleet usage from the rollup kept as runs finish. */
const platformRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/dashboard', {
    schema: {
      operationId: 'getDashboard',
      tags: PLATFORM,
      summary: 'The org at a glance: runs, memory, knowledge, automations and the newest changes',
      response: { 200: Dashboard, ...errorResponses() }
    }
  }, async (request) => dashboard(app.db, principalOf(request).orgId, new Date()))

  app.get('/usage', {
    config: { scope: 'admin' },
    schema: {
      operationId: 'getUsage',
      tags: PLATFORM,
      summary: 'Fleet usage per local day of `tz` (admin): runs, outcomes, tokens and time, zero-filled, optionally grouped',
      querystring: UsageQuery,
      response: { 200: UsageReport, ...errorResponses() }
    }
  }, async (request) => usageReport(app.db, principalOf(request).orgId, parseUsageQuery(request.query, new Date())))
}

export default platformRoutes
