import { BlockList, isIP } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { sql } from 'drizzle-orm'
import fp from 'fastify-plugin'
import { Type } from 'typebox'
import { Value } from 'typebox/value'
import { DEV_ORG, DEV_USER } from './dev-org.js'
import { IdentityResolver, type IdentityChange } from './identity.js'
import { newId } from '../db/ids.js'
import type { Role } from './tables.js'
import {
  noOrganization,
  organizationAdminRequired,
  sessionRequired,
  unauthorized,
  userRequired
} from '../../plugins/errors.js'
import { keyAccessProblem, keyMayCall } from './key-allowlist.js'
import { SELF_HEADER } from '../providers/self-reach.js'

/**
 * Route scopes, declared on each route as `config: { scope }`, never
 * derived from the path. A route that declares nothing is `org`.
 */
export const SCOPES = ['public', 'org', 'user', 'admin', 'session'] as const
export type Scope = (typeof SCOPES)[number]

/** Who is calling, in which org. Set by the hook below before any non-public handler. */
export interface Principal {
  kind: 'user' | 'key' | 'dev'
  orgId: string
  /** the acting user: a real user for `user`, the seeded fallback user for `dev`, null for `key` */
  userId: string | null
  role: Role
  sessionId?: string
  keyId?: string
}

declare module 'fastify' {
  interface FastifyContextConfig {
    scope?: Scope | readonly Scope[]
  }
  interface FastifyRequest {
    /** null on public routes; always set on every other /api route */
    principal: Principal | null
  }
}

/** The user id to act for when an operation needs a real, signed-in person (personal pools). */
export function realUserId(principal: Principal | null): string | null {
  return principal?.kind === 'user' ? principal.userId : null
}

/** The principal of a non-public route; the scope hook guarantees it is there. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw unauthorized()
  return request.principal
}

export function routeScopes(scope: Scope | readonly Scope[] | undefined): readonly Scope[] {
  if (scope === undefined) return ['org']
  return typeof scope === 'string' ? [scope] : scope
}

const loopback = new BlockList()
loopback.addSubnet('127.0.0.0', 8, 'ipv4')
loopback.addAddress('::1', 'ipv6')

/**
 * Whether a client address is this host (127.0.0.0/8, ::1, ::ffff:127.x). Callers pass
 * `request.ip`, which TRUST_PROXY has already resolved: behind a trusted proxy it is the
 * client's address, never the proxy's.
 */
export function isLoopback(ip: string): boolean {
  // asked twice per request: the usual answers without BlockList.check, which builds a
  // SocketAddress each call (isIP admits only canonical dotted quads: 127/8 is the prefix)
  if (ip === '127.0.0.1' || ip === '::1') return true
  const family = isIP(ip)
  if (family === 4) return ip.startsWith('127.')
  return family === 6 && loopback.check(ip, 'ipv6')
}

/**
 * Whether the Host the client asked for names this machine. A page on a foreign name that
 * its DNS points at 127.0.0.1 (DNS rebinding) comes from loopback and passes the Origin
 * checks, since Origin and Host agree; the Host it sends is still the foreign name.
 */
function loopbackHost(request: FastifyRequest): boolean {
  const name = request.hostname.replace(/^\[|\]$/g, '').toLowerCase()
  return name === '' || name === 'localhost' || name.endsWith('.localhost') || isLoopback(name)
}

/**
 * Whether this request may act in the dev org: dev-org access on, the
 * caller on this host, asking for this host by a loopback name, and not a request this
 * service made itself (to an org's MCP server or provider, which carries SELF_HEADER:
 * such a request comes back here for an org, never as the dev org's owner).
 */
export function devOrgFor(request: FastifyRequest, allowDevOrg: boolean): boolean {
  return allowDevOrg && isLoopback(request.ip) && loopbackHost(request) && request.headers[SELF_HEADER] === undefined
}

export interface PrincipalOptions {
  /** ALLOW_DEV_ORG: anonymous loopback callers act in the dev org */
  allowDevOrg: boolean
  /** `__Host-cairn_session` with Secure (production), or `cairn_session` */
  secureCookie: boolean
  /** how long a resolved session or key may be reused without the database (0: never) */
  cacheTtlMs: number
}

export interface SessionCookie {
  readonly name: string
  /** the raw token the browser sent, if any */
  read(request: FastifyRequest): string | undefined
  set(reply: FastifyReply, token: string, expiresAt: Date): void
  clear(reply: FastifyReply): void
}

declare module 'fastify' {
  interface FastifyInstance {
    /** session and key lookups (cached briefly; `invalidate()` after any identity change) */
    identity: IdentityResolver
    sessionCookie: SessionCookie
  }
}

/** Postgres channel on which instances tell each other to drop cached identities. */
const INVALIDATION_CHANNEL = 'cairn_identity'

/** The key of `Authorization: Bearer <key>`, or null when the header says anything else. */
export function bearerToken(header: string): string | null {
  const match = /^Bearer +(\S+) *$/i.exec(header)
  return match ? match[1]! : null
}

/**
 * Resolves the principal and enforces the route's declared scope. Registered inside the
 * /api scope, so every /api route is protected unless it says `scope: 'public'`.
 * Lanes, in order: bearer key (never falls back), session cookie, dev org,
 * else 401. A key is then held to the route's declared `keyAccess` (src/auth/key-allowlist.ts).
 */
export default fp(
  async function principalPlugin(app: FastifyInstance, opts: PrincipalOptions) {
    const devPrincipal: Principal = Object.freeze({
      kind: 'dev',
      orgId: DEV_ORG.id,
      userId: DEV_USER.id,
      role: 'owner'
    })
    app.decorateRequest('principal', null)

    const identity = new IdentityResolver(app.db, opts.cacheTtlMs)
    app.decorate('identity', identity)
    await listenForInvalidations(app, identity)

    const cookieName = opts.secureCookie ? '__Host-cairn_session' : 'cairn_session'
    const cookieOptions = { httpOnly: true, sameSite: 'lax', path: '/', secure: opts.secureCookie } as const
    const sessionCookie: SessionCookie = {
      name: cookieName,
      read(request) {
        const header = request.headers.cookie
        return header === undefined ? undefined : app.parseCookie(header)[cookieName]
      },
      set: (reply, token, expiresAt) =>
        void reply.setCookie(cookieName, token, { ...cookieOptions, expires: expiresAt }),
      clear: (reply) => void reply.clearCookie(cookieName, cookieOptions)
    }
    app.decorate('sessionCookie', sessionCookie)

    async function resolve(request: FastifyRequest, reply: FastifyReply): Promise<Principal> {
      const authorization = request.headers.authorization
      if (authorization !== undefined) {
        const token = bearerToken(authorization)
        const key = token === null ? null : await identity.key(token)
        if (!key) throw unauthorized()
        // a key the dev org minted (before the dev principal lost that right) is dev-org
        // access: it works only where the dev fallback would
        if (key.orgId === DEV_ORG.id && !devOrgFor(request, opts.allowDevOrg)) throw unauthorized()
        return { kind: 'key', orgId: key.orgId, userId: null, role: 'member', keyId: key.id }
      }
      const token = sessionCookie.read(request)
      if (token !== undefined) {
        const session = await identity.session(token)
        if (!session) {
          // a dead cookie is a signed-out browser, not an anonymous one: it never falls
          // through to the dev org, and it is cleared so the browser stops sending it
          sessionCookie.clear(reply)
          throw unauthorized()
        }
        if (session.extended) sessionCookie.set(reply, token, session.expiresAt)
        if (session.orgId === null || session.role === null) throw noOrganization()
        return { kind: 'user', orgId: session.orgId, userId: session.userId, role: session.role, sessionId: session.id }
      }
      if (devOrgFor(request, opts.allowDevOrg)) return devPrincipal
      throw unauthorized()
    }

    function admit(request: FastifyRequest, scopes: readonly Scope[], principal: Principal): void {
      request.principal = principal
      if (principal.kind === 'key') {
        if (scopes.includes('session')) throw sessionRequired()
        if (!keyMayCall(request.routeOptions.config)) {
          throw unauthorized('API keys may not call this route')
        }
      }
      for (const scope of scopes) enforce(scope, principal)
    }

    // every route of this scope says what a key may do there, or the app does not start
    app.addHook('onRoute', function declaredKeyAccess(route) {
      if (routeScopes(route.config?.scope).includes('public')) return
      for (const method of Array.isArray(route.method) ? route.method : [route.method]) {
        const problem = keyAccessProblem(method, route.url, route.config?.keyAccess)
        if (problem !== null) throw new Error(problem)
      }
    })

    // A callback hook, so public routes (health, config) pass without a promise
    app.addHook('onRequest', function scopeGuard(request, reply, done) {
      const scopes = routeScopes(request.routeOptions.config.scope)
      if (scopes.includes('public')) return done()
      resolve(request, reply).then((principal) => {
        try {
          admit(request, scopes, principal)
        } catch (err) {
          return done(err as Error)
        }
        done()
      }, done)
    })
  },
  { name: 'principal', fastify: '5.x', dependencies: ['errors', 'db', '@fastify/cookie', 'shutdown-refusals'] }
)

const IdentityNotice = Type.Object({
  from: Type.String(),
  change: Type.Optional(
    Type.Union([
      Type.Object({ kind: Type.Literal('session-ended'), sessionId: Type.String() }),
      Type.Object({ kind: Type.Literal('membership-removed'), orgId: Type.String(), userId: Type.String() })
    ])
  )
})

/**
 * Other instances clear their identity caches when this one changes a session, a
 * membership or a key, and hear what changed (a session ended, a membership removed)
 * so they can close what they hold for it (Postgres LISTEN/NOTIFY; PGlite has the same
 * within its process). The payload is `{from, change?}` JSON, ids only.
 */
async function listenForInvalidations(app: FastifyInstance, identity: IdentityResolver): Promise<void> {
  // this instance's own notices come back to it: the change was applied when it was made
  const self = newId()
  const heard = (payload: string) => {
    identity.clear()
    let notice: unknown
    try {
      notice = JSON.parse(payload)
    } catch {
      return
    }
    if (!Value.Check(IdentityNotice, notice) || notice.from === self || !notice.change) return
    try {
      identity.dispatch(notice.change as IdentityChange)
    } catch (err) {
      app.log.error({ err }, 'identity change listener failed')
    }
  }
  const payloadOf = (change?: IdentityChange) => JSON.stringify(change ? { from: self, change } : { from: self })
  // the third callback runs on every (re)connect: notifications missed while the
  // connection was down cannot be replayed, so forget everything then too
  const unlisten = await app.database.listen(INVALIDATION_CHANNEL, heard, () => identity.clear())
  identity.broadcast = async (change) => {
    await app.db.execute(sql`select pg_notify(${INVALIDATION_CHANNEL}, ${payloadOf(change)})`)
  }
  app.addHook('preClose', async () => {
    await app.shutdown.close('the identity listener', () => unlisten().catch(() => {}))
  })
}

function enforce(scope: Scope, principal: Principal): void {
  switch (scope) {
    case 'session':
      if (principal.kind === 'key') throw sessionRequired()
      return
    case 'user':
      if (principal.kind !== 'user') throw userRequired()
      return
    case 'admin':
      if (principal.role !== 'owner' && principal.role !== 'admin') {
        throw organizationAdminRequired()
      }
      return
    default:
  }
}
