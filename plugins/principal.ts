import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { DEV_ORG, DEV_USER } from '../src/auth/dev-org.js'
import type { Role } from '../src/auth/tables.js'
import { ApiError } from './errors.js'

/**
 * Route scopes (contract 2.2), declared on each route as `config: { scope }`, never
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

export const unauthorized = () => new ApiError(401, 'unauthorized', 'sign in or send an API key')

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

export interface PrincipalOptions {
  allowDevOrg: boolean
}

/**
 * Resolves the principal and enforces the route's declared scope. Registered inside the
 * /api scope, so every /api route is protected unless it says `scope: 'public'`.
 * Lanes, in order: bearer key, session cookie, dev org, else 401.
 */
export default fp(async function principalPlugin(app: FastifyInstance, opts: PrincipalOptions) {
  const devPrincipal: Principal = Object.freeze({ kind: 'dev', orgId: DEV_ORG.id, userId: DEV_USER.id, role: 'owner' })
  app.decorateRequest('principal', null)

  async function resolve(request: FastifyRequest): Promise<Principal> {
    if (request.headers.authorization !== undefined) {
      // API keys arrive with the identity work; until then every bearer token is unknown.
      throw unauthorized()
    }
    if (opts.allowDevOrg) return devPrincipal
    throw unauthorized()
  }

  app.addHook('onRequest', async function scopeGuard(request) {
    const scopes = routeScopes(request.routeOptions.config.scope)
    if (scopes.includes('public')) return
    const principal = await resolve(request)
    request.principal = principal
    for (const scope of scopes) enforce(scope, principal)
  })
}, { name: 'principal', fastify: '5.x', dependencies: ['errors', 'db'] })

function enforce(scope: Scope, principal: Principal): void {
  switch (scope) {
    case 'session':
      if (principal.kind === 'key') throw new ApiError(403, 'session_required', 'this route needs a signed-in session, not an API key')
      return
    case 'user':
      if (principal.kind !== 'user') throw new ApiError(403, 'user_required', 'this route needs a signed-in user')
      return
    case 'admin':
      if (principal.role !== 'owner' && principal.role !== 'admin') {
        throw new ApiError(403, 'organization_admin_required', 'this route needs an organization owner or admin')
      }
      return
    default:
  }
}
