import t from 'tap'
import { newKeyText } from '../../src/secrets/crypto.js'
import { fixtureGitHub } from '../github/fake-github.js'
import { buildTestApp } from '../helper.js'
import { fixtureRoutes, loadTenantFixtures, makeActor, walkTenantIsolation } from './walk.js'

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

t.test('every registered route with a path parameter is under the family of a tenancy fixture', async (t) => {
  const app = await buildTestApp(t)
  const { walks, uncovered, unused } = fixtureRoutes(await loadTenantFixtures(), app.routeTable)
  t.same(uncovered, [], 'routes with a path parameter under no family of a test/<group>/tenancy.ts')
  t.same(unused, [], 'families no registered route is under')
  for (const { fixture, routes } of walks)
    t.ok(routes.length > 0 || fixture.families.length === 0, `${fixture.name} walks ${routes.length} routes`)
  const walked = walks.flatMap((w) => w.routes)
  t.equal(new Set(walked).size, walked.length, 'each route is walked by one fixture')
})
