import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { members } from '../../src/auth/tables.js'
import type { Db } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import type { PoolRef } from '../../src/memory/backend.js'
import { ensurePool } from '../../src/memory/pools.js'
import { createPostgresPool } from '../../src/memory/postgres-pool.js'
import type { RunRef } from '../../src/runs/ports/memory.js'
import {
  addMember,
  buildTestApp,
  mintKey,
  signUp,
  signUpWithOrg,
  type EnvOverrides,
  type Teardown,
  type TestDatabase
} from '../helper.js'

export { waitFor } from '../helper.js'

/** Fast timings for tests; each test can override. */
export const FAST: EnvOverrides = {
  MEMORY_CAPTURE_POLL_MS: '10',
  MEMORY_CAPTURE_BACKOFF_MS: '20',
  MEMORY_CAPTURE_BACKOFF_MAX_MS: '2000',
  MEMORY_CAPTURE_LEASE_MS: '5000',
  MEMORY_HTTP_TIMEOUT_MS: '5000'
}

/**
 * Who a request is sent as. Every caller is a real identity made through the API (a session
 * cookie, an API key), or nobody: the dev org, which answers loopback callers (inject's).
 */
export interface Caller {
  orgId: string
  /** the real user, or null for a key and the dev org */
  userId: string | null
  headers: Record<string, string>
}

export const as = (caller: Caller) => caller.headers

/** The dev-org fallback: no credentials at all. */
export const devCaller: Caller = { orgId: DEV_ORG.id, userId: null, headers: {} }

export type MemoryTestApp = FastifyInstance & { testDb: TestDatabase }

/** The real app (principal, scopes, key allowlist) over a real database, with fast memory timings. */
export async function memoryTestApp(
  t: Teardown,
  options: { env?: EnvOverrides; db?: TestDatabase } = {}
): Promise<MemoryTestApp> {
  return buildTestApp(t, { env: { ...FAST, ...options.env }, ...(options.db ? { db: options.db } : {}) })
}

export interface TestOrg {
  orgId: string
  userId: string
  /** its owner, signed in */
  user: Caller
}

const owners = new Map<string, Caller>()

/** A new org whose owner signed up and created it through the API. */
export async function createOrg(app: FastifyInstance, slug: string): Promise<TestOrg> {
  const owner = await signUpWithOrg(app, { org: slug })
  const user: Caller = { orgId: owner.org.id, userId: owner.user.id, headers: { cookie: owner.cookie } }
  owners.set(owner.org.id, user)
  return { orgId: owner.org.id, userId: owner.user.id, user }
}

/**
 * Another real user (signed up through the API) in an existing org: added by the org's
 * owner through the API, or, in the dev org, which has no owner who can sign in, by a row.
 */
export async function addUser(
  app: FastifyInstance,
  orgId: string,
  role: 'owner' | 'admin' | 'member' = 'member'
): Promise<Caller> {
  const user = await signUp(app)
  const owner = owners.get(orgId)
  if (owner) await addMember(app, owner.headers.cookie!, orgId, user.user.email, role)
  else if (orgId === DEV_ORG.id) await app.db.insert(members).values({ orgId, userId: user.user.id, role })
  else throw new Error(`no owner known for org ${orgId}`)
  return { orgId, userId: user.user.id, headers: { cookie: user.cookie } }
}

/** An API key of the org, minted by its owner through the API. */
export async function keyCaller(app: FastifyInstance, org: TestOrg): Promise<Caller & { keyId: string }> {
  const key = await mintKey(app, org.user.headers.cookie!)
  return { orgId: org.orgId, userId: null, headers: { authorization: key.authorization }, keyId: key.id }
}

/** Puts facts straight into a pool of the postgres backend (as a delivered capture would). */
export async function addFacts(
  db: Db,
  orgId: string,
  scope: 'org' | 'personal',
  ownerKey: string,
  facts: string[],
  runId = newId()
): Promise<PoolRef> {
  const pool = await ensurePool(db, orgId, scope, ownerKey)
  await createPostgresPool(db).deliver(pool, { captureId: newId(), runId, rootRunId: runId, facts }, async () => true)
  return pool
}

export function runRef(orgId: string, realUserId: string | null = null): RunRef {
  const id = newId()
  return { id, rootRunId: id, orgId, realUserId }
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
  const state = {
    mode: 'ok' as Mem0Mode,
    updateMode: 'ok' as 'ok' | 'fail',
    posts: 0,
    lists: 0,
    delayMs: 0,
    searches: [] as string[]
  }
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
        const item: StoredMemory = {
          id: newId(),
          memory: m.content,
          user_id: body.user_id,
          metadata: body.metadata ?? {},
          created_at: now,
          updated_at: now
        }
        store.set(item.id, item)
        return { id: item.id, memory: item.memory, event: 'ADD' }
      })
      return send(res, 200, { results })
    }
    if (req.method === 'GET' && url.pathname === '/memories') {
      state.lists++
      return send(res, 200, {
        results: [...store.values()].filter((m) => m.user_id === url.searchParams.get('user_id'))
      })
    }
    if (req.method === 'POST' && url.pathname === '/search') {
      state.searches.push(String(body.query))
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
