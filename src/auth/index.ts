import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { lt } from 'drizzle-orm'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { RateLimiterDrizzle, RateLimiterRes } from 'rate-limiter-flexible'
import {
  invalidCredentials,
  noOrganization,
  notFound,
  organizationAdminRequired,
  rateLimited,
  unauthorized
} from '../../plugins/errors.js'
import {
  ActiveOrganizationBody,
  ActiveOrganizationReply,
  AddMemberBody,
  ChangeRoleBody,
  CreateOrganizationBody,
  MemberParams,
  MemberList,
  MemberReply,
  OrganizationReply,
  OrganizationsReply,
  OrgParams,
  SessionReply,
  SignInBody,
  SignUpBody,
  UserReply,
  WhoAmIReply
} from '../../schemas/auth.js'
import { errorResponses } from '../../schemas/common.js'
import { toWire } from '../db/wire.js'
import keys from './keys.js'
import {
  addMember,
  changeRole,
  createOrganization,
  createOrganizationNamed,
  listMembers,
  listMemberships,
  removeMember,
  roleIn
} from './organizations-repo.js'
import { hashPassword, primeDummyHash, verifyAgainstDummy, verifyPassword } from './passwords.js'
import { devOrgFor } from './principal.js'
import { createSession, deleteSession, setActiveOrg } from './sessions-repo.js'
import { authRateLimits, type Role } from './tables.js'
import { hashSecret } from './tokens.js'
import { createUser, findCredentials, findUser, normalizeEmail } from './users-repo.js'
import { createWorkerLoop } from '../worker-loop.js'

export interface AuthOptions {
  /** ALLOW_DEV_ORG: GET /auth/whoami says whether this caller acts in the dev org */
  allowDevOrg: boolean
  rateLimit: { perIp: number; perAccount: number; windowMs: number }
}

const tags = ['auth']

/**
 * Identity: sessions under /auth (public paths
 * that authenticate themselves with the session cookie), organizations and members,
 * and API keys under /keys (org-scoped, admin, mint and revoke session-only).
 */
const auth: FastifyPluginAsyncTypebox<AuthOptions> = async (app, opts) => {
  primeDummyHash()
  const { identity, sessionCookie, db } = app

  // Brute-force brakes, per client address (every attempt) and per account (failed
  // sign-ins). request.ip honours TRUST_PROXY only, so a forged X-Forwarded-For from an
  // untrusted peer changes nothing. Counted in the database (one upsert per attempt), so
  // the limits hold across any number of instances.
  const { perIp, perAccount, windowMs } = opts.rateLimit
  const limiter = (keyPrefix: string, points: number) =>
    new RateLimiterDrizzle({
      storeClient: db,
      schema: authRateLimits,
      keyPrefix,
      points,
      duration: Math.ceil(windowMs / 1000),
      clearExpiredByTimeout: false
    })
  const ipLimit = limiter('auth-ip', perIp)
  const emailOf = (req: FastifyRequest) =>
    normalizeEmail(String((req.body as { email?: unknown } | undefined)?.email ?? ''))
  const signInFailures = limiter('auth-sign-in', perAccount)
  const signUpAttempts = limiter('auth-sign-up', perAccount)
  const refused = (res: RateLimiterRes) => rateLimited(Math.max(1, res.msBeforeNext) / 1000, 'attempts')
  async function limitByIp(request: FastifyRequest) {
    try {
      await ipLimit.consume(request.ip)
    } catch (err) {
      if (err instanceof RateLimiterRes) throw refused(err)
      throw err
    }
  }
  /** Refuses an account whose failures used up the window's budget (counting only, no increment). */
  async function checkAccount(limit: RateLimiterDrizzle, request: FastifyRequest) {
    const state = await limit.get(emailOf(request))
    if (state && state.consumedPoints >= perAccount) throw refused(state)
  }
  /** One more failure (or sign-up) of the account in its window. */
  async function countAccount(limit: RateLimiterDrizzle, request: FastifyRequest) {
    await limit.penalty(emailOf(request))
  }
  // windows long past are removed (a counter is read only while its window runs), by every
  // instance (the delete is idempotent), drained at shutdown like every background job
  const pruneEveryMs = Math.min(windowMs, 300_000)
  const pruner = createWorkerLoop<never>({
    name: 'auth rate-limit pruner',
    log: app.log,
    pollMs: pruneEveryMs,
    every: [
      {
        everyMs: pruneEveryMs,
        job: () => db.delete(authRateLimits).where(lt(authRateLimits.expire, new Date(Date.now() - windowMs)))
      }
    ]
  })
  app.addHook('onReady', async () => pruner.start())
  app.addHook('preClose', async () => {
    await app.shutdown.drain('the auth rate-limit pruner', (ms) => pruner.stop(ms))
  })

  /** The signed-in session behind the cookie; a bearer header never falls back to it. */
  async function requireSession(request: FastifyRequest, reply: FastifyReply) {
    if (request.headers.authorization !== undefined) throw unauthorized()
    const token = sessionCookie.read(request)
    if (token === undefined) throw unauthorized()
    const session = await identity.session(token)
    if (!session) {
      sessionCookie.clear(reply)
      throw unauthorized()
    }
    if (session.extended) sessionCookie.set(reply, token, session.expiresAt)
    return session
  }

  /** What GET /auth/session answers for a live session; null when its user is gone. */
  async function sessionAnswer(session: { userId: string; orgId: string | null; expiresAt: Date }) {
    const [user, organizations] = await Promise.all([findUser(db, session.userId), listMemberships(db, session.userId)])
    if (!user) return null
    return {
      user: toWire(user),
      session: { expiresAt: session.expiresAt.toISOString(), activeOrganizationId: session.orgId },
      organizations
    }
  }

  /** Starts a fresh session (a new token every time) and ends the one the browser held, if any. */
  async function startSession(request: FastifyRequest, reply: FastifyReply, userId: string) {
    const old = sessionCookie.read(request)
    if (old !== undefined) {
      const sessionId = hashSecret(old)
      await deleteSession(db, sessionId)
      await identity.invalidate({ kind: 'session-ended', sessionId })
    }
    const session = await createSession(db, userId)
    sessionCookie.set(reply, session.token, session.expiresAt)
  }

  /** The caller's role in :orgId; not a member is a 404 (never reveal another org), a member a 403. */
  async function requireOrgAdmin(orgId: string, userId: string): Promise<Role> {
    const role = await roleIn(db, orgId, userId)
    if (role === null) throw notFound('no such organization')
    if (role !== 'owner' && role !== 'admin') {
      throw organizationAdminRequired()
    }
    return role
  }

  app.post(
    '/auth/sign-up',
    {
      config: { scope: 'public' },
      onRequest: limitByIp,
      schema: {
        operationId: 'signUp',
        description:
          'Creates a user with the email, password and name given and answers with a session cookie; the new user belongs to no organization until they create one or are added.',
        tags,
        summary: 'Create an account and sign in (no organization yet)',
        body: SignUpBody,
        response: { 201: UserReply, ...errorResponses(429) }
      }
    },
    async (request, reply) => {
      await checkAccount(signUpAttempts, request)
      await countAccount(signUpAttempts, request)
      const user = await createUser(
        db,
        request.body.email,
        request.body.name,
        await hashPassword(request.body.password)
      )
      await startSession(request, reply, user.id)
      return reply.code(201).send({ user: toWire(user) })
    }
  )

  app.post(
    '/auth/sign-in',
    {
      config: { scope: 'public' },
      onRequest: limitByIp,
      schema: {
        operationId: 'signIn',
        description:
          'Checks an email and password and, when they match, starts a new session and sets its cookie; a wrong email and a wrong password get the same 401.',
        tags,
        summary: 'Sign in with email and password (always a new session)',
        body: SignInBody,
        response: { 200: UserReply, ...errorResponses(429) }
      }
    },
    async (request, reply) => {
      await checkAccount(signInFailures, request)
      const found = await findCredentials(db, request.body.email)
      const ok = found
        ? await verifyPassword(found.passwordHash!, request.body.password)
        : await verifyAgainstDummy(request.body.password)
      if (!found || !ok) {
        await countAccount(signInFailures, request)
        throw invalidCredentials()
      }
      await startSession(request, reply, found.id)
      const { passwordHash: _secret, ...user } = found
      return { user: toWire(user) }
    }
  )

  app.post(
    '/auth/sign-out',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'signOut',
        tags,
        summary: 'End the session: the cookie is cleared and dead at once',
        description:
          "Deletes the caller's session in the database and clears its cookie, so the cookie stops working on every instance at once.",
        response: { 204: { type: 'null' }, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const token = sessionCookie.read(request)
      if (token !== undefined) {
        const sessionId = hashSecret(token)
        await deleteSession(db, sessionId)
        // on every instance: caches forget it, its terminal and desktop sockets close (1008)
        await identity.invalidate({ kind: 'session-ended', sessionId })
      }
      sessionCookie.clear(reply)
      return reply.code(204).send(null)
    }
  )

  app.get(
    '/auth/session',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'getSession',
        tags,
        summary: 'The signed-in user, the session and their organizations',
        description:
          'Returns the user behind the session cookie, the session itself and the organizations the user belongs to with their roles.',
        response: { 200: SessionReply, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const found = await sessionAnswer(await requireSession(request, reply))
      if (!found) throw unauthorized()
      return found
    }
  )

  // The console's first question. GET /auth/session answers 401 without a session, which a
  // browser reports as an error on every page the dev org (or a signed-out person) opens;
  // this one answers 200 for each kind of caller, so "nobody signed in" is no failure.
  app.get(
    '/auth/whoami',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'whoAmI',
        tags,
        summary:
          'Who this browser acts as: a signed-in person (as GET /auth/session), the dev org, or nobody; 200 in each case',
        description:
          'Tells a browser page whom its requests act for without an error when nobody is signed in: the signed-in person with their session and organizations, the dev org for a loopback caller without a session, or nobody.',
        response: { 200: WhoAmIReply, ...errorResponses() }
      }
    },
    async (request, reply) => {
      // a key has no session, and is refused here as on the other session routes
      if (request.headers.authorization !== undefined) throw unauthorized()
      const nobody = { user: null, session: null, organizations: [] }
      const token = sessionCookie.read(request)
      if (token !== undefined) {
        const session = await identity.session(token)
        const found = session ? await sessionAnswer(session) : null
        if (found) {
          if (session!.extended) sessionCookie.set(reply, token, session!.expiresAt)
          return { kind: 'user' as const, ...found }
        }
        // a dead cookie is a signed-out browser: cleared, and never the dev org
        sessionCookie.clear(reply)
        return { kind: 'anonymous' as const, ...nobody }
      }
      return { kind: devOrgFor(request, opts.allowDevOrg) ? ('dev' as const) : ('anonymous' as const), ...nobody }
    }
  )

  app.post(
    '/auth/organizations',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'createOrganization',
        description:
          'Creates an organization named as given, makes the caller its owner and switches the session to it.',
        tags,
        summary: 'Create an organization: the caller becomes owner and it becomes the active org',
        body: CreateOrganizationBody,
        response: { 201: OrganizationReply, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      const organization =
        request.body.slug === undefined
          ? await createOrganizationNamed(db, session.userId, session.id, request.body.name)
          : await createOrganization(db, session.userId, session.id, request.body.name, request.body.slug)
      await identity.invalidate()
      return reply.code(201).send({ organization: toWire(organization) })
    }
  )

  app.get(
    '/auth/organizations',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'listOrganizations',
        tags,
        summary: "The caller's organizations and roles",
        description: "Lists every organization the signed-in user belongs to, with the user's role in each.",
        response: { 200: OrganizationsReply, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      return { organizations: await listMemberships(db, session.userId) }
    }
  )

  app.post(
    '/auth/organizations/active',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'setActiveOrganization',
        description:
          "Makes another of the user's organizations the one the session acts in; later requests are scoped to it.",
        tags,
        summary: 'Switch the session to another of your organizations',
        body: ActiveOrganizationBody,
        response: { 200: ActiveOrganizationReply, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      const { organizationId } = request.body
      if ((await roleIn(db, organizationId, session.userId)) === null) throw noOrganization()
      await setActiveOrg(db, session.id, organizationId)
      await identity.invalidate()
      return { activeOrganizationId: organizationId }
    }
  )

  app.get(
    '/auth/organizations/:orgId/members',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'listMembers',
        description:
          "Lists the organization's members with their names, emails and roles, oldest first; any member may read it (another organization is not found).",
        tags,
        summary: "List the organization's members and their roles (members)",
        params: OrgParams,
        response: { 200: MemberList, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      if ((await roleIn(db, request.params.orgId, session.userId)) === null) throw notFound('no such organization')
      return { items: (await listMembers(db, request.params.orgId)).map((m) => toWire(m)) }
    }
  )

  app.post(
    '/auth/organizations/:orgId/members',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'addMember',
        description:
          'Adds an existing user, found by email, to the organization with the role given; only owners and admins may.',
        tags,
        summary: 'Add an existing user to the organization (owner or admin)',
        params: OrgParams,
        body: AddMemberBody,
        response: { 201: MemberReply, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      const actorRole = await requireOrgAdmin(request.params.orgId, session.userId)
      const member = await addMember(db, request.params.orgId, actorRole, request.body.email, request.body.role)
      await identity.invalidate()
      return reply.code(201).send({ member: toWire(member) })
    }
  )

  app.patch(
    '/auth/organizations/:orgId/members/:userId',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'changeMemberRole',
        description: "Sets a member's role; refused when it would leave the organization without an owner.",
        tags,
        summary: "Change a member's role (owner or admin; the last owner stays)",
        params: MemberParams,
        body: ChangeRoleBody,
        response: { 200: MemberReply, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      const actorRole = await requireOrgAdmin(request.params.orgId, session.userId)
      const member = await changeRole(db, request.params.orgId, actorRole, request.params.userId, request.body.role)
      await identity.invalidate()
      return { member: toWire(member) }
    }
  )

  app.delete(
    '/auth/organizations/:orgId/members/:userId',
    {
      config: { scope: 'public' },
      schema: {
        operationId: 'removeMember',
        description:
          "Takes a user out of the organization; refused when it would remove the last owner, and the user's sessions lose access on their next request.",
        tags,
        summary: 'Remove a member (owner or admin; the last owner stays); effective on the next request',
        params: MemberParams,
        response: { 204: { type: 'null' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const session = await requireSession(request, reply)
      const actorRole = await requireOrgAdmin(request.params.orgId, session.userId)
      await removeMember(db, request.params.orgId, actorRole, request.params.userId)
      await identity.invalidate({
        kind: 'membership-removed',
        orgId: request.params.orgId,
        userId: request.params.userId
      })
      return reply.code(204).send(null)
    }
  )

  await app.register(keys, { prefix: '/keys' })
}

export default auth
