import { timingSafeEqual } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { Registry } from 'prom-client'
import { notFound } from '../../plugins/errors.js'
import { isLoopback } from '../auth/principal.js'
import { SELF_HEADER } from '../providers/self-reach.js'
import type { Config } from '../config.js'
import { databaseGauges } from './database-gauges.js'
import { processRegistry, useInstruments, type Instruments } from './metrics.js'
import type { Tracing } from './tracing.js'

declare module 'fastify' {
  interface FastifyInstance {
    telemetry: {
      /** the process's instruments (counters, histograms) */
      instruments: Instruments
      /** exports the spans ended so far; nothing to do when tracing is off */
      flush(): Promise<void>
    }
  }
}

export interface TelemetryOptions {
  config: Pick<Config, 'METRICS_TOKEN' | 'METRICS_PER_ORG'>
  /** the app's tracing, when an OTLP endpoint is configured (src/telemetry/tracing.ts) */
  tracing: Tracing | null
}

/** Whether the caller shows the metrics token (compared in constant time). */
function showsToken(header: string | undefined, token: string | undefined): boolean {
  if (token === undefined || header === undefined) return false
  const match = /^Bearer\s+(\S+)$/i.exec(header)
  if (!match) return false
  const given = Buffer.from(match[1]!)
  const wanted = Buffer.from(token)
  return given.length === wanted.length && timingSafeEqual(given, wanted)
}

/**
 * GET /metrics (Prometheus text), outside the org's API: on loopback, or with
 * `Authorization: Bearer <METRICS_TOKEN>`; anyone else is told there is no such route.
 * Every request's duration by route pattern and status; the database's backlog as gauges.
 */
export default fp(
  async function telemetry(app: FastifyInstance, opts: TelemetryOptions) {
    const { config, tracing } = opts
    const instruments = useInstruments(config.METRICS_PER_ORG)
    const gauges = databaseGauges(app.database, config.METRICS_PER_ORG, (err) =>
      app.log.warn({ err }, 'metrics: the database did not answer the counts; its gauges are left out of this scrape')
    )
    // every scrape renders the same registries: merged once
    const registry = Registry.merge([processRegistry(), instruments.registry, gauges.registry])
    app.decorate('telemetry', { instruments, flush: async () => tracing?.flush() })

    app.addHook('onResponse', async (request, reply) => {
      instruments.httpDuration.observe(
        {
          method: request.method,
          // the route's pattern (bounded), never the URL; a request no route matched is `unmatched`
          route: request.routeOptions.url ?? 'unmatched',
          status_code: String(reply.statusCode)
        },
        reply.elapsedTime / 1000
      )
    })

    // a scrape every few seconds is no request worth a span (@fastify/otel's switch of a route)
    app.get('/metrics', { schema: { hide: true }, config: { otel: false } as never }, async (request, reply) => {
      // (a request this service made to an org's URL is not a caller on this host)
      const local = isLoopback(request.ip) && request.headers[SELF_HEADER] === undefined
      if (!local && !showsToken(request.headers.authorization, config.METRICS_TOKEN))
        throw notFound(`no route for ${request.method} ${request.url.split('?')[0]}`)
      reply.header('content-type', registry.contentType).header('cache-control', 'no-store')
      return registry.metrics()
    })

    app.addHook('onClose', async () => {
      gauges.stop()
      await tracing?.stop()
    })
  },
  { name: 'telemetry', fastify: '5.x', dependencies: ['db'] }
)
