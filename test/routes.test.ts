import t from 'tap'
import { routeScopes, SCOPES } from '../plugins/principal.js'
import { buildTestApp } from './helper.js'

/** Spec section 5, "Public paths": nothing else under /api may skip org scoping. */
function isSpecPublic(method: string, url: string): boolean {
  if ((method === 'GET' || method === 'HEAD') && (url === '/api/health' || url === '/api/config')) return true
  return url.startsWith('/api/auth/') || url.startsWith('/api/chatplatform/')
}

/** Routes outside /api: the API description only. */
const OUTSIDE_API = [/^\/openapi\.json$/, /^\/docs(\/.*)?$/]

t.test('every route is classified, and only the spec public list is public', async (t) => {
  const app = await buildTestApp(t)
  t.ok(app.routeTable.length > 0)
  for (const route of app.routeTable) {
    const name = `${route.method} ${route.url}`
    if (!route.url.startsWith('/api')) {
      t.ok(OUTSIDE_API.some((re) => re.test(route.url)), `${name} is an allowed non-/api route`)
      continue
    }
    const scopes = routeScopes(route.config.scope)
    t.ok(scopes.length > 0 && scopes.every((s) => (SCOPES as readonly string[]).includes(s)), `${name} has known scopes`)
    if (scopes.includes('public')) t.ok(isSpecPublic(route.method, route.url), `${name} is public and on the spec's public list`)
  }
})

t.test('with dev-org access off, an anonymous caller gets 401 on every non-public route', async (t) => {
  const app = await buildTestApp(t, { env: { ALLOW_DEV_ORG: 'false' } })
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || routeScopes(route.config.scope).includes('public')) continue
    const url = route.url.replace(/:[A-Za-z]+/g, '0190b8f0-0000-7000-8000-000000000000')
    const res = await app.inject({ method: route.method as 'GET', url })
    t.equal(res.statusCode, 401, `${route.method} ${route.url}`)
    // a HEAD answer has no body to read
    if (route.method !== 'HEAD') t.equal(res.json().error, 'unauthorized', `${route.method} ${route.url}`)
  }
})
