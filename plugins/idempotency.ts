import { createHash, randomUUID } from 'node:crypto'
import { sql, type SQL } from 'drizzle-orm'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { rowsOf, type Tx } from '../src/db/client.js'
import { ApiError } from './errors.js'
import { principalOf, type Principal } from './principal.js'

/** Contract 3 numbers. */
export const IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000
export const IDEMPOTENCY_LOCK_MS = 60 * 1000
const MAX_KEY_LENGTH = 255

declare module 'fastify' {
  interface FastifyContextConfig {
    /** the route honours `Idempotency-Key` (contract 3) */
    idempotent?: boolean
  }
  interface FastifyRequest {
    /** set on idempotent routes when the request carries a key and holds its lock */
    idempotency: IdempotencyLock | null
  }
}

export interface StoredAnswer {
  status: number
  /** the exact bytes sent, then replayed */
  payload: string
}

export interface IdempotencyLock {
  readonly key: string
  /**
   * Stores the answer in the caller's transaction (the one doing the work), so the work
   * and its recorded answer commit together. Throws `idempotency_key_in_use` when the
   * lock was lost (a retry took over after it expired), rolling the work back.
   */
  complete(tx: Tx, status: number, body: unknown): Promise<StoredAnswer>
  /**
   * The same as one SQL fragment, for handlers that do their work in a single statement:
   * an `UPDATE … RETURNING 1` that yields a row only while the lock is still held. Use it
   * as a CTE the work depends on (`with k as (…) insert … select … from k`), so the work
   * happens only if the answer is stored; then call `markStored()`.
   */
  completion(status: number, body: unknown): { update: SQL; answer: StoredAnswer }
  markStored(): void
}

/** JSON with object keys sorted at every level: equal bodies give equal fingerprints. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null'
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  const entries = Object.keys(value as Record<string, unknown>)
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`)
  return `{${entries.join(',')}}`
}

/** Contract 3: SHA-256 of the route, the principal and the canonical JSON body. */
export function fingerprintOf(route: string, principal: Principal, body: unknown): string {
  const who = `${principal.kind}:${principal.orgId}:${principal.userId ?? ''}:${principal.keyId ?? ''}`
  return createHash('sha256').update(`${route}\n${who}\n${canonicalJson(body)}`).digest('hex')
}

/**
 * Send a stored answer: same status, same bytes. Used both for the first answer and for
 * replays, so a replay is byte for byte what the first caller got.
 */
export function sendStored(reply: FastifyReply, answer: StoredAnswer): FastifyReply {
  return reply.code(answer.status).type('application/json; charset=utf-8').send(answer.payload)
}

interface KeyRow {
  fingerprint: string
  state: 'in_flight' | 'done'
  lock_token: string | null
  response_status: number | null
  response_body: string | null
  taken: boolean
}

interface LockState {
  orgId: string
  route: string
  key: string
  token: string
  /** the answer was stored with the work */
  stored: boolean
}

const lockStates = new WeakMap<FastifyRequest, LockState>()

/**
 * Contract 3 as one plugin. A route opts in with `config: { idempotent: true }`. With an
 * `Idempotency-Key` header, a preHandler (after validation and auth, so those failures use
 * nothing up) takes the key's lock in its own short transaction, or answers with the stored
 * reply, `409 idempotency_key_reused` or `409 idempotency_key_in_use`. The handler stores
 * its answer through `request.idempotency.complete(tx, …)` inside its work transaction;
 * answers it did not store that way are stored (4xx) or released (5xx) on send.
 */
export default fp(async function idempotencyPlugin(app: FastifyInstance) {
  app.decorateRequest('idempotency', null)

  async function idempotencyGate(request: FastifyRequest, reply: FastifyReply) {
    const header = request.headers['idempotency-key']
    if (header === undefined) return
    const key = Array.isArray(header) ? header.join(',') : header
    if (key.trim() === '' || key.length > MAX_KEY_LENGTH) {
      throw new ApiError(400, 'invalid_idempotency_key', `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters`)
    }
    const principal = principalOf(request)
    const route = `${request.method} ${request.url.split('?')[0]}`
    const fingerprint = fingerprintOf(route, principal, request.body ?? null)
    const token = randomUUID()

    // Take the key: insert it, or take over a row whose lock expired (a crashed first
    // request) or whose retention ended. Concurrent inserts of one key serialize on the
    // primary key, so exactly one caller gets `taken`.
    const result = await app.db.execute(sql`
      insert into idempotency_keys (org_id, route, key, fingerprint, state, lock_token, locked_until, expires_at)
      values (${principal.orgId}, ${route}, ${key}, ${fingerprint}, 'in_flight', ${token},
              now() + make_interval(secs => ${IDEMPOTENCY_LOCK_MS / 1000}), now() + make_interval(secs => ${IDEMPOTENCY_RETENTION_MS / 1000}))
      on conflict (org_id, route, key) do update set
        fingerprint = excluded.fingerprint, state = 'in_flight', lock_token = excluded.lock_token,
        locked_until = excluded.locked_until, expires_at = excluded.expires_at, created_at = now(),
        response_status = null, response_type = null, response_body = null
      where idempotency_keys.expires_at < now()
         or (idempotency_keys.state = 'in_flight' and idempotency_keys.locked_until < now())
      returning true as taken, fingerprint, state, lock_token, response_status, response_body`)
    const taken = rowsOf<KeyRow>(result)[0]
    if (taken) {
      lockStates.set(request, { orgId: principal.orgId, route, key, token, stored: false })
      const completion = (status: number, body: unknown) => {
        const payload = JSON.stringify(body)
        const update = sql`
            update idempotency_keys set state = 'done', lock_token = null, locked_until = null,
              response_status = ${status}, response_type = 'application/json', response_body = ${payload}
            where org_id = ${principal.orgId} and route = ${route} and key = ${key} and lock_token = ${token}
            returning 1 as ok`
        return { update, answer: { status, payload } }
      }
      const markStored = () => {
        const state = lockStates.get(request)
        if (state) state.stored = true
      }
      request.idempotency = {
        key,
        completion,
        markStored,
        async complete(tx, status, body) {
          const { update, answer } = completion(status, body)
          if (rowsOf(await tx.execute(update)).length === 0) throw inUse()
          markStored()
          return answer
        }
      }
      return
    }

    const existing = rowsOf<KeyRow>(await app.db.execute(sql`
      select fingerprint, state, lock_token, response_status, response_body from idempotency_keys
      where org_id = ${principal.orgId} and route = ${route} and key = ${key}`))[0]
    if (!existing) throw inUse() // deleted between the two statements (a 5xx released it): retry
    if (existing.fingerprint !== fingerprint) {
      throw new ApiError(409, 'idempotency_key_reused', 'this Idempotency-Key was used with a different request')
    }
    if (existing.state !== 'done' || existing.response_status === null || existing.response_body === null) throw inUse()
    reply.header('idempotent-replayed', 'true')
    return sendStored(reply, { status: existing.response_status, payload: existing.response_body })
  }

  // Answers the handler did not store with its work: 4xx from the handler are kept, 5xx
  // (and anything unexpected) release the key so a corrected retry runs.
  async function idempotencyRecord(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
    const state = lockStates.get(request)
    if (!state || state.stored) return payload
    state.stored = true
    const status = reply.statusCode
    if (status < 500 && typeof payload === 'string') {
      await app.db.execute(sql`
        update idempotency_keys set state = 'done', lock_token = null, locked_until = null,
          response_status = ${status}, response_type = 'application/json', response_body = ${payload}
        where org_id = ${state.orgId} and route = ${state.route} and key = ${state.key} and lock_token = ${state.token}`)
    } else {
      await release(state)
    }
    return payload
  }

  // a request that ends without sending (client gone mid-handler) releases its lock
  async function idempotencyCleanup(request: FastifyRequest) {
    const state = lockStates.get(request)
    if (state && !state.stored) {
      state.stored = true
      await release(state)
    }
  }

  // Only the routes that opt in carry these hooks, so every other route pays nothing for
  // contract 3. Route-level hooks run after the scope's, so the gate still comes after
  // authentication and validation.
  app.addHook('onRoute', (route) => {
    if (!route.config?.idempotent) return
    route.preHandler = [...asList(route.preHandler), idempotencyGate]
    route.onSend = [...asList(route.onSend), idempotencyRecord as never]
    route.onResponse = [...asList(route.onResponse), idempotencyCleanup]
  })

  async function release(state: LockState) {
    await app.db.execute(sql`
      delete from idempotency_keys
      where org_id = ${state.orgId} and route = ${state.route} and key = ${state.key} and lock_token = ${state.token} and state = 'in_flight'`)
  }
}, { name: 'idempotency', fastify: '5.x', dependencies: ['db', 'errors', 'principal'] })

function asList<T>(hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return []
  return Array.isArray(hooks) ? hooks : [hooks]
}

export function inUse() {
  return new ApiError(409, 'idempotency_key_in_use', 'a request with this Idempotency-Key is still in progress; retry shortly', {
    headers: { 'retry-after': '1' }
  })
}

/** Deletes keys past their retention. */
export async function pruneIdempotencyKeys(app: FastifyInstance): Promise<void> {
  await app.db.execute(sql`delete from idempotency_keys where expires_at < now()`)
}
