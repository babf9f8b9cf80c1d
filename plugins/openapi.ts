import swagger, { type OpenAPIV3_2 } from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import compress from '@fastify/compress'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { COMPONENT_NAME } from '../schemas/common.js'
import { routeScopes } from '../src/auth/principal.js'

export interface OpenApiOptions {
  release: string
}

const TAGS = [
  { name: 'system', description: 'Health and what this deployment offers (public)' },
  { name: 'auth', description: 'Sign-up, sessions, organizations and members' },
  { name: 'keys', description: 'API keys of an organization' },
  { name: 'runs', description: 'Runs, threads, their event streams and chat' },
  { name: 'memory', description: 'The Memory Hub: search, browse, correct; the capture outbox and the recall ledger' },
  {
    name: 'runtime',
    description:
      'Tool policies and approvals (the terminal and desktop WebSockets are described in the agent runtime guide)'
  },
  { name: 'artifacts', description: 'Uploads, artifacts made by runs and people, their versions and proposals' },
  { name: 'knowledge', description: 'Records with versions, ranked search, documents made searchable, and drafts' },
  { name: 'skills', description: 'Skills (SKILL.md), their versions and proposed changes, and skill runs' },
  { name: 'playbooks', description: 'Playbooks: skills run one after another, each step seeing the last' },
  { name: 'projects', description: 'Projects that hold a task board' },
  { name: 'tasks', description: 'Tasks on a board, moved between columns, run by agents' },
  { name: 'secrets', description: 'Org secrets: sealed values runs get as environment variables' },
  { name: 'automations', description: 'Cron schedules that start runs, their fires and triggers' },
  { name: 'integrations', description: 'Connected services (GitHub, Slack) of an organization' },
  { name: 'platform', description: 'The dashboard and fleet usage' },
  {
    name: 'providers',
    description: 'Model providers of an organization (OpenAI-compatible, Anthropic) and the models runs may name'
  },
  { name: 'github', description: 'GitHub: repositories, pull requests, skill import and the repository wiki' },
  {
    name: 'mcp',
    description:
      "The Model Context Protocol: Cairn as an MCP server (/api/mcp) and the organization's MCP servers whose tools runs call"
  },
  {
    name: 'chatplatform',
    description: 'Chat platforms calling in (Slack events and button clicks), authenticated by their signature'
  }
]

/**
 * Refusals any /api operation can meet before its handler, described once
 * in `components.responses` and referred to from every operation.
 */
const SHARED_REFUSALS: Record<string, { name: string; description: string; retryAfter?: boolean }> = {
  408: { name: 'RequestTimeout', description: 'the request was not received in time (`request_timeout`)' },
  414: { name: 'UriTooLong', description: 'the path or a parameter is too long (`uri_too_long`)' },
  431: { name: 'HeadersTooLarge', description: 'the request headers are too large (`headers_too_large`)' },
  503: {
    name: 'ServiceUnavailable',
    description: 'the database (or another dependency) is unavailable; retry after `Retry-After` seconds',
    retryAfter: true
  }
}

const RETRY_AFTER = {
  description: 'seconds to wait before retrying',
  schema: { type: 'integer', minimum: 0, description: 'seconds to wait before retrying' }
}

type Json = Record<string, unknown>

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * A body the route reads as a stream itself (multipart, raw bytes), so it declares no
     * `body` schema to validate: documented in the OpenAPI document only.
     */
    streamedBody?: { mediaType: string; schema: unknown }
  }
}

interface RouteSchema {
  body?: unknown
  consumes?: string[]
  response?: Record<string, Json>
  security?: unknown
  [key: string]: unknown
}

const errorRef = () => ({ $ref: 'ErrorBody' })

/**
 * What a route's own rules add to its documented answers: `security: []` on public
 * routes, 413 and 415 wherever a body is read, `Idempotent-Replayed` on the answers of
 * idempotent routes (and `Retry-After` on their 409 in flight), `Retry-After` on 429.
 */
function documented(
  schema: RouteSchema,
  config: {
    scope?: Parameters<typeof routeScopes>[0]
    idempotent?: boolean
    streamedBody?: { mediaType: string; schema: unknown }
  }
): RouteSchema {
  const out: RouteSchema = { ...schema }
  if (config.streamedBody) {
    out.body = config.streamedBody.schema
    out.consumes = [config.streamedBody.mediaType]
  }
  if (routeScopes(config.scope).includes('public')) out.security = []
  const responses: Record<string, Json> = { ...schema.response }
  if (out.body !== undefined) {
    responses[413] ??= errorRef()
    responses[415] ??= errorRef()
  }
  if (config.idempotent) {
    for (const status of Object.keys(responses).filter((s) => s.startsWith('2'))) {
      responses[status] = { ...responses[status], headers: { 'Idempotent-Replayed': IDEMPOTENT_REPLAYED } }
    }
    responses[409] = { ...(responses[409] ?? errorRef()), headers: { 'Retry-After': RETRY_AFTER.schema } }
  }
  if (responses[429]) responses[429] = { ...responses[429], headers: { 'Retry-After': RETRY_AFTER.schema } }
  out.response = responses
  return out
}

const IDEMPOTENT_REPLAYED = {
  type: 'string',
  enum: ['true'],
  description: 'present on a replayed answer: an earlier request with the same Idempotency-Key produced it'
}

/**
 * Moves every schema named with `named()` (schemas/common.ts) into `components.schemas`
 * and puts a `$ref` in its place, so each resource is one named type for client
 * generators. Two different schemas under one name are a programming error.
 */
function hoistNamedSchemas(document: Json): void {
  const components = (document.components ??= {}) as Json
  const schemas = (components.schemas ??= {}) as Record<string, unknown>
  const seen = new Map<string, string>()
  // inside `parameters` a schema stays inline: the generator moved its description to the
  // parameter, so it is not the named schema any more
  const visit = (node: unknown, inParameter = false): unknown => {
    if (Array.isArray(node)) return node.map((item) => visit(item, inParameter))
    if (node === null || typeof node !== 'object') return node
    const object = node as Json
    const name = object[COMPONENT_NAME]
    const out: Json = {}
    for (const [key, value] of Object.entries(object)) {
      if (key !== COMPONENT_NAME) out[key] = visit(value, inParameter || key === 'parameters')
    }
    if (typeof name !== 'string' || inParameter) return out
    const text = JSON.stringify(out)
    const earlier = seen.get(name)
    if (earlier !== undefined && earlier !== text)
      throw new Error(`two different schemas are named ${name}:\n${earlier}\n${text}`)
    seen.set(name, text)
    schemas[name] = out
    return { $ref: `#/components/schemas/${name}` }
  }
  document.paths = visit(document.paths)
  for (const [name, schema] of Object.entries(schemas)) {
    // a component may itself carry its name (ErrorBody via addSchema): never a self-reference
    const inner = visit(schema) as Json
    schemas[name] = inner.$ref === `#/components/schemas/${name}` ? schemas[name] : inner
  }
}

function addSharedRefusals(document: Json): void {
  const components = document.components as Json
  const responses = (components.responses ??= {}) as Json
  for (const refusal of Object.values(SHARED_REFUSALS)) {
    responses[refusal.name] = {
      description: refusal.description,
      ...(refusal.retryAfter ? { headers: { 'Retry-After': RETRY_AFTER } } : {}),
      content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorBody' } } }
    }
  }
  for (const [path, item] of Object.entries(document.paths as Record<string, Record<string, Json>>)) {
    if (!path.startsWith('/api/')) continue
    for (const operation of Object.values(item)) {
      const operationResponses = operation.responses as Json
      for (const [status, refusal] of Object.entries(SHARED_REFUSALS)) {
        operationResponses[status] ??= { $ref: `#/components/responses/${refusal.name}` }
      }
    }
  }
}

/**
 * A form field that carries an object or an array (Slack's `payload`) carries it as JSON:
 * said in the form's `encoding`, so that a client sends JSON there rather than the form
 * style's `a[b]=c` fields.
 */
function describeJsonFormFields(document: Json): void {
  const schemas = ((document.components as Json | undefined)?.schemas ?? {}) as Record<string, Json>
  const resolve = (schema: Json | undefined): Json | undefined => {
    const ref = schema?.$ref
    return typeof ref === 'string' ? schemas[ref.replace('#/components/schemas/', '')] : schema
  }
  for (const item of Object.values(document.paths as Record<string, Record<string, Json>>)) {
    for (const operation of Object.values(item)) {
      const content = ((operation.requestBody as Json | undefined)?.content as Record<string, Json> | undefined)?.[
        'application/x-www-form-urlencoded'
      ]
      const properties = (resolve(content?.schema as Json | undefined)?.properties ?? {}) as Record<string, Json>
      const encoding: Json = {}
      for (const [name, property] of Object.entries(properties)) {
        const type = resolve(property)?.type
        if (type === 'object' || type === 'array') encoding[name] = { contentType: 'application/json' }
      }
      if (content && Object.keys(encoding).length > 0) content.encoding = encoding
    }
  }
}

/**
 * The OpenAPI 3.1 document, built from every route's TypeBox schemas, at
 * `GET /openapi.json`, with an interactive reference at `/docs`. Both live outside
 * /api so the spec's list of public /api paths stays exact. For client generators: named
 * components, an operationId and a tag on every operation, `security: []` on public
 * routes, event streams as `text/event-stream`.
 */
export default fp(
  async function openapiPlugin(app: FastifyInstance, opts: OpenApiOptions) {
    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: {
          title: 'Cairn API',
          version: opts.release,
          description:
            'Multi-tenant agent platform: runs, threads, chat, memory and more. Errors are `{error, message}` JSON.',
          license: { name: 'Proprietary', identifier: 'LicenseRef-Cairn-Proprietary' },
          contact: { name: 'The operators of this Cairn deployment' }
        },
        tags: TAGS,
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
      },
      transform: ({ schema, url, route }) => {
        // an upgrade is no HTTP operation a generated client could call
        if ((route as { websocket?: boolean }).websocket) return { schema: { ...schema, hide: true }, url }
        return { schema: documented(schema as RouteSchema, route.config ?? {}) as typeof schema, url }
      },
      transformObject: (generated) => {
        const document = structuredClone(
          'openapiObject' in generated ? generated.openapiObject : generated.swaggerObject
        ) as Json
        hoistNamedSchemas(document)
        addSharedRefusals(document)
        describeJsonFormFields(document)
        return document as Partial<OpenAPIV3_2.Document>
      }
    })
    await app.register(async function docsPage(docs) {
      // the reference's page and assets are 2.4 MB of JavaScript and CSS: compressed for the
      // browsers that ask (brotli or gzip), here only, never on the API's answers or streams
      await docs.register(compress, { global: true, threshold: 1024 })
      // /docs gets its own policy (same-origin scripts and styles), replacing the API's deny-all
      // one; no upgrade-insecure-requests, so the page also works over plain http in development
      await docs.register(swaggerUi, {
        routePrefix: '/docs',
        uiConfig: { deepLinking: true },
        staticCSP:
          "default-src 'self'; base-uri 'self'; font-src 'self' data:; frame-ancestors 'self'; img-src 'self' data:; " +
          "object-src 'none'; script-src 'self'; script-src-attr 'none'; style-src 'self' 'unsafe-inline'"
      })
    })
    // the server is the one that answered, as an absolute URL: a relative "/" made some
    // generators call `//api/…`
    app.get('/openapi.json', { schema: { hide: true } }, async (request) => {
      const origin = `${request.protocol}://${request.host}`
      return { ...app.swagger(), servers: [{ url: origin, description: 'the server this document was read from' }] }
    })
  },
  { name: 'openapi', fastify: '5.x' }
)
