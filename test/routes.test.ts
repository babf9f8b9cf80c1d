import { readFileSync } from 'node:fs'
import { dirname } from 'node:path'
import t from 'tap'
import { embeddedOnly } from './passes.js'
import { CONTRIBUTING, longestFit, routeIndexRows, routeIndexSection, writtenSection } from '../scripts/route-index.js'
import { keyAccessProblem, keyAllowlist, keyMayCall } from '../src/auth/key-allowlist.js'
import { routeScopes, SCOPES } from '../src/auth/principal.js'
import { buildTestApp, mintKey, signUpWithOrg } from './helper.js'

/**
 * Public paths: nothing else under /api may skip org scoping. Of the
 * chat-platform family (`/api/chatplatform/*`) only the routes that verify a platform's
 * request signature exist, each listed here by name: Slack's Events API and Slack's
 * interactivity (approval buttons).
 */
const CHAT_PLATFORM_ROUTES = ['POST /api/chatplatform/slack/events', 'POST /api/chatplatform/slack/interactions']

function isSpecPublic(method: string, url: string): boolean {
  if ((method === 'GET' || method === 'HEAD') && (url === '/api/health' || url === '/api/config')) return true
  if (url.startsWith('/api/chatplatform/')) return CHAT_PLATFORM_ROUTES.includes(`${method} ${url}`)
  return url.startsWith('/api/auth/')
}

/**
 * Routes outside /api: the root (a redirect to the console), the API description, the Memory Hub console (static
 * pages that call the API) and the Prometheus metrics (loopback or METRICS_TOKEN, never an org's).
 */
const OUTSIDE_API = [/^\/$/, /^\/openapi\.json$/, /^\/docs(\/.*)?$/, /^\/hub(\/.*)?$/, /^\/metrics$/]

const fakeId = '0190b8f0-0000-7000-8000-000000000000'
const fill = (url: string) => url.replace(/:[A-Za-z0-9_]+/g, fakeId)

t.test('every route is classified, and only the spec public list is public', embeddedOnly, async (t) => {
  const app = await buildTestApp(t)
  t.ok(app.routeTable.length > 0)
  for (const route of app.routeTable) {
    const name = `${route.method} ${route.url}`
    if (!route.url.startsWith('/api')) {
      t.ok(
        OUTSIDE_API.some((re) => re.test(route.url)),
        `${name} is an allowed non-/api route`
      )
      continue
    }
    const scopes = routeScopes(route.config.scope)
    t.ok(
      scopes.length > 0 && scopes.every((s) => (SCOPES as readonly string[]).includes(s)),
      `${name} has known scopes`
    )
    if (scopes.includes('public'))
      t.ok(isSpecPublic(route.method, route.url), `${name} is public and on the spec's public list`)
  }
  for (const entry of CHAT_PLATFORM_ROUTES) {
    const [method, url] = entry.split(' ')
    const route = app.routeTable.find((r) => r.method === method && r.url === url)
    t.ok(
      route && routeScopes(route.config.scope).includes('public'),
      `${entry} exists and is public (it authenticates itself by signature)`
    )
  }
})

t.test('every non-public route declares its API-key access (config.keyAccess)', embeddedOnly, async (t) => {
  const app = await buildTestApp(t)
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || routeScopes(route.config.scope).includes('public')) continue
    t.equal(keyAccessProblem(route.method, route.url, route.config.keyAccess), null, `${route.method} ${route.url}`)
  }
})

t.test('with dev-org access off, an anonymous caller gets 401 on every non-public route', embeddedOnly, async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'false' } })
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || routeScopes(route.config.scope).includes('public')) continue
    const res = await app.inject({ method: route.method as 'GET', url: fill(route.url) })
    t.equal(res.statusCode, 401, `${route.method} ${route.url}`)
    // a HEAD answer has no body by definition
    if (route.method !== 'HEAD') t.equal(res.json().error, 'unauthorized', `${route.method} ${route.url}`)
  }
})

t.test('an API key on every route answers as the route declares', embeddedOnly, async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'true' } })
  const owner = await signUpWithOrg(app)
  const { authorization } = await mintKey(app, owner.cookie)
  // over real HTTP, so a stream that lets the key in can be read for its status and dropped
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  let allowedSeen = 0
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || route.websocket) continue
    const name = `${route.method} ${route.url}`
    const scopes = routeScopes(route.config.scope)
    const res = await callOnce(`${base}${fill(route.url)}`, route.method, { authorization })
    const error = res.error
    if (scopes.includes('public')) {
      // public routes authenticate themselves; the session-only auth routes refuse a bearer header
      t.not(res.statusCode, 500, `${name} (public)`)
      continue
    }
    if (scopes.includes('session')) {
      t.equal(res.statusCode, 403, `${name}: session-only`)
      if (error !== undefined) t.equal(error, 'session_required', name)
    } else if (keyMayCall(route.config)) {
      allowedSeen++
      t.not(res.statusCode, 401, `${name}: keyAccess ${route.config.keyAccess}, the key gets through`)
      t.not(error, 'session_required', name)
    } else {
      t.equal(res.statusCode, 401, `${name}: keyAccess none`)
      if (error !== undefined) t.equal(error, 'unauthorized', name)
    }
  }
  t.ok(allowedSeen > 0, 'the walk saw routes a key may call')
})

/** One request: its status and, unless it is an event stream (then dropped), its error identifier. */
async function callOnce(
  url: string,
  method: string,
  headers: Record<string, string>
): Promise<{ statusCode: number; error: string | undefined }> {
  const abort = new AbortController()
  const res = await fetch(url, { method, headers, signal: abort.signal })
  if (res.headers.get('content-type')?.startsWith('text/event-stream')) {
    abort.abort()
    return { statusCode: res.status, error: undefined }
  }
  const text = await res.text()
  return { statusCode: res.status, error: text === '' ? undefined : (JSON.parse(text) as { error?: string }).error }
}

t.test(
  'what keys may call is read from the routes, and a route that declares nothing stops the start',
  embeddedOnly,
  async (t) => {
    const app = await buildTestApp(t)
    const allowlist = keyAllowlist(app.routeTable)
    for (const entry of [
      'POST /api/runs',
      'GET /api/runs/:id',
      // an integration acting for the org reads and decides a run's waiting tool calls
      'GET /api/runs/:id/approvals',
      'POST /api/runs/:id/approvals/:approvalId',
      'POST /api/mcp'
    ])
      t.ok(allowlist.includes(entry), `${entry} is on the derived allowlist`)
    for (const entry of ['GET /api/keys', 'DELETE /api/runs/:id', 'PUT /api/tools/policies/:tool', 'GET /api/secrets'])
      t.notOk(allowlist.includes(entry), `${entry} is not`)
    t.notOk(
      allowlist.some((entry) => entry.startsWith('HEAD ')),
      'HEAD follows GET'
    )

    t.match(keyAccessProblem('GET', '/api/x', undefined), /declares no API-key access/)
    t.match(keyAccessProblem('POST', '/api/x', 'read'), /is a write/)
    t.match(keyAccessProblem('GET', '/api/x', 'dispatch'), /is a read/)
    t.match(keyAccessProblem('GET', '/api/x', 'write'), /unknown keyAccess/)
    t.equal(keyAccessProblem('HEAD', '/api/x', 'read'), null)

    await t.rejects(
      buildTestApp(t, { apiPlugins: [async (api) => void api.get('/probe/undeclared', async () => ({}))] }),
      /GET \/api\/probe\/undeclared declares no API-key access/,
      'a route without a declared key access fails the start, naming itself'
    )
  }
)

/** CONTRIBUTING.md's route index as written: each row's URL prefixes and the folder that serves them. */
function routeIndex(): Array<{ prefix: string; folder: string }> {
  const section = writtenSection(readFileSync(CONTRIBUTING, 'utf8'))
  const rows: Array<{ prefix: string; folder: string }> = []
  for (const line of section.split('\n')) {
    const cells = /^\| (.+?) \| `([^`]+)`/.exec(line)
    if (!cells) continue
    for (const [, prefix] of cells[1]!.matchAll(/`([^`]+)`/g)) rows.push({ prefix: prefix!, folder: cells[2]! })
  }
  return rows
}

t.test(
  "CONTRIBUTING.md's route index is written from the registered routes (npm run docs:routes)",
  embeddedOnly,
  async (t) => {
    const app = await buildTestApp(t)
    const written = writtenSection(readFileSync(CONTRIBUTING, 'utf8'))
    const wanted = routeIndexSection(app.routeTable)
    if (written !== wanted) {
      const have = new Set(written.split('\n'))
      const stale = wanted.split('\n').filter((line) => !have.has(line))
      t.fail(
        `${CONTRIBUTING}'s route index is stale; run npm run docs:routes. Rows it lacks or words differently:\n${stale.join('\n')}`
      )
    } else t.pass(`${CONTRIBUTING}'s route index is up to date`)

    // and what it says holds: the longest prefix that fits each route names the folder of the file that declared it
    const index = routeIndex()
    t.ok(index.length > 10, 'the index is read')
    const used = new Set<string>()
    for (const route of app.routeTable) {
      const name = `${route.method} ${route.url}`
      const row = longestFit(index, route.url)
      if (!row) {
        t.fail(`${name}: no row of the route index covers it`)
        continue
      }
      used.add(row.prefix)
      // a library's own routes (the /docs pages) have no project file to compare
      if (route.source !== undefined)
        t.equal(
          `${dirname(route.source)}/`,
          row.folder,
          `${name} is served from ${route.source}; the index says ${row.prefix} → ${row.folder}`
        )
    }
    t.same(
      index.filter((r) => !used.has(r.prefix)).map((r) => r.prefix),
      [],
      'every prefix of the index serves a route'
    )
  }
)

t.test(
  'the route index of a new group: one row per family, a longer prefix only where another folder serves it',
  embeddedOnly,
  async (t) => {
    const routes = [
      { url: '/api/things', source: 'src/things/index.ts' },
      { url: '/api/things/:id', source: 'src/things/index.ts' },
      { url: '/api/things/:thingId/parts', source: 'src/things/parts.ts' },
      { url: '/api/things/:id/watch', source: 'src/watch/index.ts' },
      { url: '/api/integrations/things', source: 'src/things/index.ts' },
      { url: '/api/integrations', source: 'src/integrations/index.ts' },
      { url: '/docs/json', source: undefined }
    ]
    t.same(routeIndexRows(routes), [
      { prefixes: ['/api/things', '/api/integrations/things'], folder: 'src/things/', files: ['index.ts', 'parts.ts'] },
      { prefixes: ['/api/things/:id/watch'], folder: 'src/watch/', files: ['index.ts'] },
      { prefixes: ['/api/integrations'], folder: 'src/integrations/', files: ['index.ts'] }
    ])
    t.throws(
      () =>
        routeIndexRows([
          { url: '/api/x', source: 'src/a/index.ts' },
          { url: '/api/x', source: 'src/b/index.ts' }
        ]),
      /\/api\/x is served from src\/a\/ and src\/b\//
    )
  }
)
