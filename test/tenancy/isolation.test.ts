import t from 'tap'
import { newKeyText } from '../../src/secrets/crypto.js'
import { fixtureGitHub } from '../github/fake-github.js'
import { buildTestApp } from '../helper.js'
import { makeActor, TENANT_FIXTURES, walkTenantIsolation } from './walk.js'

t.test(
  "tenant isolation: the other org's ids are 404 (or a scope error) and change nothing; lists never leak",
  async (t) => {
    const app = await buildTestApp(t, {
      env: { ALLOW_DEV_ORG: 'false', SECRETS_KEY: newKeyText(), GITHUB_API_URL: (await fixtureGitHub()).url }
    })
    const attacker = await makeActor(app, 'attacker')
    const victim = await makeActor(app, 'victim')
    const findings = await walkTenantIsolation(app, attacker, victim)
    t.ok(findings.length > 0)
    for (const f of findings) t.ok(f.ok, `${f.route} as ${f.caller}: ${f.status} ${f.detail}`)
    // the session caller must see a plain 404 on every id route (never a 403 that admits the id exists)
    for (const f of findings.filter((f) => f.caller === 'session' && f.status !== 0 && !f.route.endsWith('(list)'))) {
      t.equal(f.status, 404, `${f.route} as a session`)
    }
    // control: the ids the walk used are real (their owner reaches them), so the 404s above mean something
    const keys = await app.inject({ method: 'GET', url: '/api/keys', headers: { cookie: victim.cookie } })
    const victimKey = keys.json().items[0].id as string
    t.equal(
      (await app.inject({ method: 'DELETE', url: `/api/keys/${victimKey}`, headers: { cookie: victim.cookie } }))
        .statusCode,
      204
    )
    const members = await app.inject({
      method: 'PATCH',
      url: `/api/auth/organizations/${victim.org.id}/members/${victim.user.id}`,
      headers: { cookie: victim.cookie },
      payload: { role: 'owner' }
    })
    t.equal(members.statusCode, 200)
  }
)

t.test('every registered route with a path parameter is covered by a tenancy fixture', async (t) => {
  const app = await buildTestApp(t)
  const covered = new Set(TENANT_FIXTURES.flatMap((f) => f.routes))
  // path parameters that name no tenant resource: the org always comes from the principal
  // (a secret's PUT sets the caller's own org's name; the walk checks the victim's row stays)
  const NOT_TENANT_IDS = new Set(['PUT /api/tools/policies/:tool', 'PUT /api/secrets/:name'])
  for (const route of app.routeTable) {
    if (!route.url.startsWith('/api') || !route.url.includes(':') || route.method === 'HEAD') continue
    const name = `${route.method} ${route.url}`
    t.ok(covered.has(name) || NOT_TENANT_IDS.has(name), `${name} is in test/tenancy/walk.ts`)
  }
})
