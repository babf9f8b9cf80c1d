import { validate } from '@readme/openapi-parser'
import t from 'tap'
import { buildTestApp } from './helper.js'

t.test('GET /openapi.json is a valid OpenAPI 3.1 document listing every route', async (t) => {
  const app = await buildTestApp(t)
  const res = await app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(res.statusCode, 200)
  const doc = res.json()
  t.equal(doc.openapi, '3.1.0')
  const result = await validate(structuredClone(doc))
  t.ok(result.valid, `valid document: ${JSON.stringify(result.valid ? [] : result.errors).slice(0, 2000)}`)

  const paths = doc.paths as Record<string, Record<string, { responses?: Record<string, unknown> }>>
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || route.method === 'HEAD') continue
    const path = route.url.replace(/:([A-Za-z]+)/g, '{$1}')
    const operation = paths[path]?.[route.method.toLowerCase()]
    t.ok(operation, `${route.method} ${route.url} is documented`)
    t.ok(operation?.responses?.['200'] ?? operation?.responses?.['201'] ?? operation?.responses?.['204'] ?? operation?.responses?.['101'], `${route.method} ${route.url} documents its success`)
    t.ok(operation?.responses?.['400'] && operation.responses['500'], `${route.method} ${route.url} documents its errors`)
  }
})

t.test('the interactive reference is served at /docs', async (t) => {
  const app = await buildTestApp(t)
  const res = await app.inject({ method: 'GET', url: '/docs' })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /text\/html/)
})
