import { existsSync, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import { longestFit } from '../../scripts/route-index.js'
import { rowsOf } from '../../src/db/client.js'
import { mintKey, signUpWithOrg, type SignedIn, type TestOrg } from '../helper.js'

const TEST_ROOT = dirname(dirname(fileURLToPath(import.meta.url)))

/**
 * The tenant-isolation walk: a reusable property test. Two orgs (an attacker and a
 * victim) both get data; then every route that takes an id is called with the victim's
 * ids by the attacker's session and by the attacker's API key, and must answer 404 (or
 * a scope error before it: 401, 403) and change nothing; and every list route, called by
 * the attacker, must not contain a single victim id.
 *
 * HOW TO EXTEND IT (every route group that adds routes with ids or lists): export
 * `tenantFixtures` from `test/<group>/tenancy.ts` (the walk finds the file), each with
 * - `families`: the URL prefixes of its routes with ids (`/api/things/:id`): every registered
 *   route with a path parameter under one is walked, so a new route of the family joins by
 *   being registered; `notIds` names the ones whose parameter is no tenant resource, and why;
 * - `lists`: your list routes (`GET /api/things`);
 * - `seed(app, owner)`: creates rows for that org through the API (owner.cookie,
 *   owner.authorization) and returns the path parameters to use, by name ({id, runId…});
 *   the fuzz test seeds its orgs with the same fixtures, so these ids reach its handlers too;
 * - `snapshot(app, owner)`: reads that org's rows straight from the database, in a stable
 *   order; it must be identical before and after the attacker's calls;
 * - `body(route)`: a valid body for the write routes (so a 400 does not hide a leak).
 * test/tenancy/isolation.test.ts fails when a registered route with a path parameter is
 * under no family, or a family has no route, so a new route cannot skip this walk.
 */

export interface Actor extends SignedIn {
  org: TestOrg
  /** `Bearer cairn_…`: a key of the actor's org */
  authorization: string
}

export interface TenantFixture {
  name: string
  /**
   * URL prefixes (`/api/things/:id`): the walk calls every registered route with a path
   * parameter that one of them fits, unless another fixture's family fits it longer
   */
  families: string[]
  /** routes under the families whose path parameter names no tenant resource, each with why */
  notIds?: Record<string, string>
  lists: string[]
  seed(app: FastifyInstance, owner: Actor): Promise<Record<string, string>>
  snapshot(app: FastifyInstance, owner: Actor): Promise<unknown>
  body?(route: string, attacker: Actor): unknown
}

export async function rows(app: FastifyInstance, query: ReturnType<typeof sql>): Promise<unknown[]> {
  return rowsOf(await app.db.execute(query))
}

/** Every group's fixtures: the `tenantFixtures` of each `test/<group>/tenancy.ts`, by folder name. */
export async function loadTenantFixtures(): Promise<TenantFixture[]> {
  const fixtures: TenantFixture[] = []
  for (const folder of readdirSync(TEST_ROOT, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort()) {
    const file = join(TEST_ROOT, folder, 'tenancy.ts')
    if (!existsSync(file)) continue
    const module = (await import(pathToFileURL(file).href)) as { tenantFixtures?: TenantFixture[] }
    if (!module.tenantFixtures) throw new Error(`test/${folder}/tenancy.ts exports no tenantFixtures`)
    fixtures.push(...module.tenantFixtures)
  }
  return fixtures
}

/** A fixture and the registered routes it walks: the routes with a path parameter under its families. */
export interface FixtureRoutes {
  fixture: TenantFixture
  routes: string[]
}

/**
 * Which fixture walks each registered `/api` route with a path parameter: the one with the
 * longest family that fits it. Routes no family fits are `uncovered`, families no route fits
 * `unused` (a renamed route would otherwise leave its fixture walking nothing).
 */
export function fixtureRoutes(
  fixtures: readonly TenantFixture[],
  routeTable: ReadonlyArray<{ method: string; url: string }>
): { walks: FixtureRoutes[]; uncovered: string[]; unused: string[] } {
  const families = fixtures.flatMap((fixture) => fixture.families.map((prefix) => ({ prefix, fixture })))
  const walks = fixtures.map((fixture) => ({ fixture, routes: [] as string[] }))
  const uncovered: string[] = []
  const used = new Set<string>()
  for (const route of routeTable) {
    if (!route.url.startsWith('/api') || !route.url.includes(':') || route.method === 'HEAD') continue
    const name = `${route.method} ${route.url}`
    const family = longestFit(families, route.url)
    if (family === undefined) {
      uncovered.push(name)
      continue
    }
    used.add(`${family.fixture.name} ${family.prefix}`)
    if (family.fixture.notIds?.[name] !== undefined) continue
    walks.find((walk) => walk.fixture === family.fixture)!.routes.push(name)
  }
  const unused = families
    .filter((f) => !used.has(`${f.fixture.name} ${f.prefix}`))
    .map((f) => `${f.fixture.name}: ${f.prefix}`)
  return { walks, uncovered, unused }
}

/** A signed-up user with an org of their own and a key for it. */
export async function makeActor(app: FastifyInstance, name: string): Promise<Actor> {
  const owner = await signUpWithOrg(app, { name, org: `${name} org` })
  const { authorization } = await mintKey(app, owner.cookie, `${name} key`)
  return { ...owner, authorization }
}

export function fillParams(pattern: string, params: Record<string, string>): string {
  return pattern.replace(/:([A-Za-z0-9_]+)/g, (_m, name: string) => {
    const value = params[name]
    if (value === undefined) throw new Error(`the fixture gave no value for :${name} in ${pattern}`)
    return encodeURIComponent(value)
  })
}

export interface WalkFinding {
  route: string
  caller: 'session' | 'key'
  status: number
  ok: boolean
  detail: string
}

/** Runs every fixture: the attacker against the victim's ids and lists. */
export async function walkTenantIsolation(
  app: FastifyInstance,
  attacker: Actor,
  victim: Actor
): Promise<WalkFinding[]> {
  const findings: WalkFinding[] = []
  const { walks, uncovered } = fixtureRoutes(await loadTenantFixtures(), app.routeTable)
  if (uncovered.length > 0) throw new Error(`no tenancy fixture covers ${uncovered.join(', ')}`)
  for (const { fixture, routes } of walks) {
    await fixture.seed(app, attacker) // the attacker has data of its own, so lists are not trivially empty
    const params = await fixture.seed(app, victim)
    const victimIds = Object.values(params).filter(
      (v) => v.length >= 8 && v !== attacker.org.id && v !== attacker.user.id
    )
    const before = JSON.stringify(await fixture.snapshot(app, victim))
    for (const route of routes) {
      const [method, pattern] = route.split(' ') as [string, string]
      const body = fixture.body?.(route, attacker)
      for (const [caller, headers] of [
        ['session', { cookie: attacker.cookie }],
        ['key', { authorization: attacker.authorization }]
      ] as const) {
        const res = await app.inject({
          method: method as 'GET',
          url: fillParams(pattern, params),
          headers,
          ...(body === undefined ? {} : { payload: body as object })
        })
        const ok = res.statusCode === 404 || res.statusCode === 401 || res.statusCode === 403
        findings.push({
          route: `${fixture.name}: ${route}`,
          caller,
          status: res.statusCode,
          ok,
          detail: res.body.slice(0, 200)
        })
      }
    }
    const after = JSON.stringify(await fixture.snapshot(app, victim))
    findings.push({
      route: `${fixture.name}: victim rows unchanged`,
      caller: 'session',
      status: 0,
      ok: before === after,
      detail: `${before} → ${after}`
    })
    for (const route of fixture.lists) {
      const [method, url] = route.split(' ') as [string, string]
      for (const [caller, headers] of [
        ['session', { cookie: attacker.cookie }],
        ['key', { authorization: attacker.authorization }]
      ] as const) {
        const res = await app.inject({ method: method as 'GET', url, headers })
        const leaked = [...victimIds, victim.org.id].filter((id) => res.body.includes(id))
        findings.push({
          route: `${fixture.name}: ${route} (list)`,
          caller,
          status: res.statusCode,
          ok: leaked.length === 0 && res.statusCode < 500,
          detail: leaked.join(', ')
        })
      }
    }
  }
  return findings
}
