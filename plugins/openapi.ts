import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

export interface OpenApiOptions {
  release: string
}

/**
 * The OpenAPI 3.1 document, built from every route's TypeBox schemas, at
 * `GET /openapi.json`, with an interactive reference at `/docs`. Both live outside
 * /api so the spec's list of public /api paths stays exact.
 */
export default fp(async function openapiPlugin(app: FastifyInstance, opts: OpenApiOptions) {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Cairn API',
        version: opts.release,
        description: 'Multi-tenant agent platform: runs, threads, chat, memory and more. Errors are `{error, message}` JSON.'
      },
      components: {
        securitySchemes: {
          session: { type: 'apiKey', in: 'cookie', name: 'cairn_session' },
          apiKey: { type: 'http', scheme: 'bearer', description: 'cairn_… API key' }
        }
      },
      security: [{ session: [] }, { apiKey: [] }]
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`)
    }
  })
  // /docs gets its own policy (same-origin scripts and styles), replacing the API's deny-all
  // one; no upgrade-insecure-requests, so the page also works over plain http in development
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    uiConfig: { deepLinking: true },
    staticCSP: "default-src 'self'; base-uri 'self'; font-src 'self' data:; frame-ancestors 'self'; img-src 'self' data:; " +
      "object-src 'none'; script-src 'self'; script-src-attr 'none'; style-src 'self' 'unsafe-inline'"
  })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
}, { name: 'openapi', fastify: '5.x' })
