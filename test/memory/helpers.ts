import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import Fastify, { type FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import dbPlugin from '../../plugins/db.js'
import errorsPlugin, { ApiError } from '../../plugins/errors.js'
import featuresPlugin from '../../plugins/features.js'
import { routeScopes, type Principal } from '../../plugins/principal.js'
import { DEV_ORG, DEV_USER, seedDevOrg } from '../../src/auth/dev-org.js'
import { members, organizations, users } from '../../src/auth/tables.js'
import type { Db } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import type { PoolRef } from '../../src/memory/backend.js'
import memoryHub from '../../src/memory/hub.js'
import memory from '../../src/memory/index.js'
import { ensurePool } from '../../src/memory/pools.js'
import { createPostgresPool } from '../../src/memory/postgres-pool.js'
import type { RunRef } from '../../src/runs/memory-port.js'
import { ErrorBody } from '../../schemas/common.js'
import { createTestDatabase, testConfig, type EnvOverrides, type Teardown, type TestDatabase } from '../helper.js'

export const DEV_PRINCIPAL: Principal = { kind: 'dev', orgId: DEV_ORG.id, userId: DEV_USER.id, role: 'owner' }

/** Fast timings for tests; each test can override. */
export const FAST: EnvOverrides = {
  MEMORY_CAPTURE_POLL_MS: '10',
  MEMORY_CAPTURE_BACKOFF_MS: '20',
  MEMORY_CAPTURE_BACKOFF_MAX_MS: '2000',
  MEMORY_CAPTURE_LEASE_MS: '5000',
  MEMORY_HTTP_TIMEOUT_MS: '5000'
}

/**
 * A stub of the session lane (which lives on another branch): the principal comes from the
 * `x-test-principal` header (JSON), else the dev org. Scopes are enforced as the real hook does.
 */
const stubPrincipal = fp(async function stubPrincipal(app: FastifyInstance) {
  app.decorateRequest('principal', null)
  app.addHook('onRequest', async (request) => {
    const header = request.headers['x-test-principal']
    const principal: Principal = typeof header === 'string' ? JSON.parse(header) : DEV_PRINCIPAL
    request.principal = principal
    const scopes = routeScopes(request.routeOptions.config.scope)
    if (scopes.includes('admin') && principal.role !== 'owner' && principal.role !== 'admin') {
      throw new ApiError(403, 'organization_admin_required', 'this route needs an organization owner or admin')
    }
    if (scopes.includes('user') && principal.kind !== 'user') throw new ApiError(403, 'user_required', 'this route needs a signed-in user')
  })
}, { name: 'principal' })

export type MemoryTestApp = FastifyInstance & { testDb: TestDatabase }

/** The memory plugins over a real database with a stub principal, for real-user and multi-org cases. */
export async function memoryTestApp(t: Teardown, options: { env?: EnvOverrides; db?: TestDatabase } = {}): Promise<MemoryTestApp> {
  const db = options.db ?? (await createTestDatabase(t))
  const config = testConfig({ ...(db.url ? { DATABASE_URL: db.url } : {}), ...FAST, ...options.env })
  await seedDevOrg(db.database.db)
  const app = Fastify({
    logger: false,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true } }
  }).withTypeProvider<TypeBoxTypeProvider>()
  app.addSchema(ErrorBody)
  await app.register(errorsPlugin)
  await app.register(dbPlugin, { database: db.database, closeOnShutdown: false })
  await app.register(featuresPlugin)
  await app.register(memoryHub, { config })
  await app.register(async (api) => {
    await api.register(stubPrincipal)
    await api.register(memory, { backendName: config.MEMORY_BACKEND })
  }, { prefix: '/api' })
  t.teardown(() => app.close())
  await app.ready()
  return Object.assign(app as unknown as FastifyInstance, { testDb: db })
}

export const as = (principal: Principal) => ({ 'x-test-principal': JSON.stringify(principal) })

export interface TestOrg {
  orgId: string
  userId: string
  /** a real signed-in user of the org (owner) */
  user: Principal
}

/** A second org with a real owner, written directly (the identity lane is on another branch). */
export async function createOrg(db: Db, slug: string, role: 'owner' | 'admin' | 'member' = 'owner'): Promise<TestOrg> {
  const orgId = newId()
  const userId = newId()
  await db.insert(organizations).values({ id: orgId, name: slug, slug })
  await db.insert(users).values({ id: userId, email: `${slug}-${userId}@example.test`, name: slug })
  await db.insert(members).values({ orgId, userId, role })
  return { orgId, userId, user: { kind: 'user', orgId, userId, role } }
}

/** Another real user in an existing org. */
export async function addUser(db: Db, orgId: string, role: 'owner' | 'admin' | 'member' = 'member'): Promise<Principal> {
  const userId = newId()
  await db.insert(users).values({ id: userId, email: `u-${userId}@example.test`, name: 'user' })
  await db.insert(members).values({ orgId, userId, role })
  return { kind: 'user', orgId, userId, role }
}

/** Puts facts straight into a pool of the postgres backend (as a delivered capture would). */
export async function addFacts(db: Db, orgId: string, scope: 'org' | 'personal', ownerKey: string, facts: string[], runId = newId()): Promise<PoolRef> {
  const pool = await ensurePool(db, orgId, scope, ownerKey)
  await createPostgresPool(db).deliver(pool, { captureId: newId(), runId, rootRunId: runId, facts }, async () => true)
  return pool
}

export function runRef(orgId: string, realUserId: string | null = null): RunRef {
  const id = newId()
  return { id, rootRunId: id, orgId, realUserId }
}

export async function waitFor<T>(what: string, check: () => Promise<T | undefined | null | false>, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 15))
  }
}

export type Mem0Mode = 'ok' | 'fail' | 'hang' | 'reject' | 'garbage'

interface StoredMemory {
  id: string
  memory: string
  user_id: string
  metadata: Record<string, unknown>
  created_at: string
  updated_at: string
}

/**
 * A local memory service speaking the mem0 REST API, which tests can tell to fail (5xx), hang,
 * refuse (4xx) or answer garbage. It counts capture deliveries per capture id.
 */
export async function startMem0(t: Teardown) {
  const store = new Map<string, StoredMemory>()
  const deliveries = new Map<string, number>()
  const state = { mode: 'ok' as Mem0Mode, updateMode: 'ok' as 'ok' | 'fail', posts: 0, delayMs: 0 }
  const hanging = new Set<ServerResponse>()

  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body))
  }
  const read = async (req: IncomingMessage) => {
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const text = Buffer.concat(chunks).toString()
    return text ? JSON.parse(text) : undefined
  }

  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    const body = await read(req)
    const idMatch = /^\/memories\/([^/]+)$/.exec(url.pathname)
    if (req.method === 'POST' && url.pathname === '/memories') {
      state.posts++
      if (state.mode === 'hang') {
        hanging.add(res)
        return
      }
      if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs))
      if (state.mode === 'fail') return send(res, 503, { detail: 'unavailable' })
      if (state.mode === 'reject') return send(res, 422, { detail: 'bad request' })
      if (state.mode === 'garbage') {
        res.writeHead(200, { 'content-type': 'text/html' })
        return res.end('<html>oops')
      }
      const captureId = String(body.metadata?.capture_id ?? '')
      deliveries.set(captureId, (deliveries.get(captureId) ?? 0) + 1)
      const results = (body.messages as Array<{ content: string }>).map((m) => {
        const now = new Date().toISOString()
        const item: StoredMemory = { id: newId(), memory: m.content, user_id: body.user_id, metadata: body.metadata ?? {}, created_at: now, updated_at: now }
        store.set(item.id, item)
        return { id: item.id, memory: item.memory, event: 'ADD' }
      })
      return send(res, 200, { results })
    }
    if (req.method === 'GET' && url.pathname === '/memories') {
      return send(res, 200, { results: [...store.values()].filter((m) => m.user_id === url.searchParams.get('user_id')) })
    }
    if (req.method === 'POST' && url.pathname === '/search') {
      const words = String(body.query).toLowerCase().split(/\s+/)
      const results = [...store.values()]
        .filter((m) => m.user_id === body.user_id && words.some((w) => m.memory.toLowerCase().includes(w)))
        .map((m) => ({ ...m, score: 0.5 }))
        .slice(0, body.limit ?? 100)
      return send(res, 200, { results })
    }
    if (idMatch) {
      const item = store.get(decodeURIComponent(idMatch[1]!))
      if (!item) return send(res, 404, { detail: 'not found' })
      if (req.method === 'GET') return send(res, 200, item)
      if (req.method === 'PUT') {
        if (state.updateMode === 'fail') return send(res, 500, { detail: 'boom' })
        item.memory = body.text
        item.updated_at = new Date().toISOString()
        return send(res, 200, { message: 'Memory updated successfully!' })
      }
      if (req.method === 'DELETE') {
        store.delete(item.id)
        return send(res, 200, { message: 'Memory deleted successfully!' })
      }
    }
    send(res, 404, { detail: 'no route' })
  })
  server.listen(0, '127.0.0.1')
  await new Promise((r) => server.once('listening', r))
  t.teardown(async () => {
    for (const res of hanging) res.destroy()
    server.closeAllConnections()
    await new Promise((r) => server.close(r))
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    store,
    deliveries,
    state,
    /** lets hanging requests go (they never complete) */
    releaseHanging() {
      for (const res of hanging) res.destroy()
      hanging.clear()
    }
  }
}

