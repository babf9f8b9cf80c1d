import { brotliDecompressSync, gunzipSync } from 'node:zlib'
import { validate } from '@readme/openapi-parser'
import t from 'tap'
import { embeddedOnly } from './passes.js'
import { buildTestApp } from './helper.js'

t.test('GET /openapi.json is a valid OpenAPI 3.1 document listing every route', embeddedOnly, async (t) => {
  const app = await buildTestApp(t)
  const res = await app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(res.statusCode, 200)
  const doc = res.json()
  t.equal(doc.openapi, '3.1.0')
  const result = await validate(structuredClone(doc))
  t.ok(result.valid, `valid document: ${JSON.stringify(result.valid ? [] : result.errors).slice(0, 2000)}`)

  const paths = doc.paths as Record<string, Record<string, Operation>>
  const operationIds = new Set<string>()
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || route.method === 'HEAD') continue
    const path = route.url.replace(/:([A-Za-z]+)/g, '{$1}')
    const operation = paths[path]?.[route.method.toLowerCase()]
    if (route.websocket) {
      // an upgrade is no operation a generated client can call; the README describes them
      t.notOk(operation, `${route.method} ${route.url} (WebSocket) is left out`)
      continue
    }
    const name = `${route.method} ${route.url}`
    if (!operation) {
      t.fail(`${name} is documented`)
      continue
    }
    t.ok(
      operation.responses?.['200'] ??
        operation.responses?.['201'] ??
        operation.responses?.['202'] ??
        operation.responses?.['204'],
      `${name} documents its success`
    )
    t.ok(operation.responses?.['400'] && operation.responses['500'], `${name} documents its errors`)
    t.match(operation.operationId, /^[a-z][A-Za-z0-9]*$/, `${name} has a camelCase operationId`)
    t.notOk(operationIds.has(operation.operationId!), `${name}: operationId ${operation.operationId} is unique`)
    operationIds.add(operation.operationId!)
    t.equal(operation.tags?.length, 1, `${name} has one tag`)
    t.match(operation.description, /^[A-Z`].{20,}\.$/, `${name} has a description, a sentence`)
    t.not(operation.description, operation.summary, `${name}: its description says more than its summary`)
    const isPublic = route.config.scope === 'public'
    t.equal(
      operation.security !== undefined && operation.security.length === 0,
      isPublic,
      `${name}: security [] exactly when public`
    )
    if (operation.requestBody)
      t.ok(operation.responses?.['413'] && operation.responses['415'], `${name} documents 413 and 415`)
  }
})

interface Operation {
  operationId?: string
  summary?: string
  description?: string
  tags?: string[]
  security?: unknown[]
  requestBody?: unknown
  responses?: Record<string, { content?: Record<string, unknown>; headers?: Record<string, unknown>; $ref?: string }>
}

t.test(
  'the document names its resources, streams events as text/event-stream and declares the contract headers',
  embeddedOnly,
  async (t) => {
    const app = await buildTestApp(t)
    const doc = (
      await app.inject({ method: 'GET', url: '/openapi.json', headers: { host: 'cairn.example.test:8443' } })
    ).json()
    t.same(
      doc.servers.map((s: { url: string }) => s.url),
      ['http://cairn.example.test:8443'],
      'the server that answered, as an absolute URL'
    )
    t.ok(doc.info.license?.name, 'info.license')
    t.ok(doc.info.contact?.name, 'info.contact')
    const declared = new Map(
      (doc.tags as Array<{ name: string; description?: string }>).map((tag) => [tag.name, tag.description])
    )
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Operation>>)) {
      for (const [method, operation] of Object.entries(item)) {
        for (const tag of operation.tags ?? [])
          t.ok(declared.get(tag), `${method} ${path}: its tag ${tag} is declared, with a description`)
      }
    }
    const schemas = doc.components.schemas as Record<string, unknown>
    for (const name of [
      'Run',
      'Thread',
      'RunEvent',
      'RunChange',
      'MemoryItem',
      'MemorySearchItem',
      'Capture',
      'RecallFrame',
      'User',
      'Organization',
      'ApiKey',
      'ErrorBody'
    ]) {
      t.ok(schemas[name], `components.schemas.${name}`)
    }
    const paths = doc.paths as Record<string, Record<string, Operation>>
    t.same(paths['/api/runs/{id}']!.get!.responses!['200']!.content, {
      'application/json': { schema: { $ref: '#/components/schemas/RunReply' } }
    })
    for (const [path, method] of [
      ['/api/runs/{id}/events', 'get'],
      ['/api/runs/{rootRunId}/thread-events', 'get'],
      ['/api/runs/changes', 'get'],
      ['/api/chat', 'post']
    ] as const) {
      const content = paths[path]![method]!.responses!['200']!.content!
      t.same(Object.keys(content), ['text/event-stream'], `${path} answers text/event-stream`)
    }
    // a generator reads a response's schema only: there, the payload of one frame, by name
    const streamed = (path: string, method: 'get' | 'post') =>
      (paths[path]![method]!.responses!['200']!.content!['text/event-stream'] as { schema: unknown }).schema
    t.same(streamed('/api/runs/{id}/events', 'get'), { $ref: '#/components/schemas/RunStreamEvent' })
    t.same(streamed('/api/runs/{rootRunId}/thread-events', 'get'), { $ref: '#/components/schemas/RunEvent' })
    t.same(streamed('/api/runs/changes', 'get'), { $ref: '#/components/schemas/RunChange' })
    t.same(streamed('/api/chat', 'post'), { $ref: '#/components/schemas/ChatStreamEvent' })
    t.same(schemas.RunStreamEvent, {
      anyOf: [{ $ref: '#/components/schemas/RunEvent' }, { $ref: '#/components/schemas/RunStreamEnd' }],
      description: (schemas.RunStreamEvent as { description: string }).description
    })
    // the Memory Hub's sentence errors are said to be sentences where they are answered
    const memoryDelete = paths['/api/memory/item/{id}']!.delete!.responses! as Record<string, { description?: string }>
    t.match(memoryDelete['404']!.description, /`not found in this pool`/)
    t.match(memoryDelete['403']!.description, /`sign-in required`.*`memory disabled`/)
    t.match(
      (paths['/api/memory/captures/{runId}/retry']!.post!.responses! as Record<string, { description?: string }>)[
        '404'
      ]!.description,
      /`no dead capture for this run in your org`/
    )
    const upload = schemas.UploadRequest as { properties: { file: unknown } }
    t.match(
      upload.properties.file,
      { type: 'string', format: 'binary', contentMediaType: 'application/octet-stream' },
      "an upload's file is binary"
    )
    const createRun = paths['/api/runs']!.post!.responses!
    t.ok(createRun['201']!.headers?.['Idempotent-Replayed'], 'Idempotent-Replayed on a created run')
    t.ok(createRun['409']!.headers?.['Retry-After'], 'Retry-After on 409 idempotency_key_in_use')
    t.ok(createRun['415'], '415 on POST /api/runs')
    t.equal(createRun['503']!.$ref, '#/components/responses/ServiceUnavailable')
    t.ok(paths['/api/auth/sign-in']!.post!.responses!['429']!.headers?.['Retry-After'], 'Retry-After on 429')
  }
)

t.test(
  'the interactive reference is served at /docs, its assets compressed; API answers are not',
  embeddedOnly,
  async (t) => {
    const app = await buildTestApp(t)
    const res = await app.inject({ method: 'GET', url: '/docs' })
    t.equal(res.statusCode, 200)
    t.match(res.headers['content-type'], /text\/html/)
    const plain = await app.inject({ method: 'GET', url: '/docs/static/swagger-ui-bundle.js' })
    t.equal(plain.statusCode, 200)
    t.notOk(plain.headers['content-encoding'], 'uncompressed for a client that does not ask')
    for (const encoding of ['br', 'gzip']) {
      const packed = await app.inject({
        method: 'GET',
        url: '/docs/static/swagger-ui-bundle.js',
        headers: { 'accept-encoding': encoding }
      })
      t.equal(packed.statusCode, 200)
      t.equal(packed.headers['content-encoding'], encoding)
      const unpacked = encoding === 'br' ? brotliDecompressSync(packed.rawPayload) : gunzipSync(packed.rawPayload)
      t.ok(unpacked.equals(plain.rawPayload), `${encoding}: the same bytes`)
      t.ok(
        packed.rawPayload.length < plain.rawPayload.length / 2,
        `${encoding}: ${plain.rawPayload.length} bytes became ${packed.rawPayload.length}`
      )
    }
    const api = await app.inject({ method: 'GET', url: '/api/config', headers: { 'accept-encoding': 'br, gzip' } })
    t.equal(api.statusCode, 200)
    t.notOk(api.headers['content-encoding'], 'the API answers as it did')
  }
)
