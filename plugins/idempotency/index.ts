import { createHash } from 'node:crypto'
import { sql, type SQL } from 'drizzle-orm'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { rowsOf, type Db, type Tx } from '../../src/db/client.js'
import { isDatabaseUnavailable } from '../../src/db/faults.js'
import { ApiError, describeError, idempotencyKeyInUse, idempotencyKeyReused, invalidIdempotencyKey } from '../errors.js'
import { asList } from '../hook-list.js'
import { principalOf, type Principal } from '../../src/auth/principal.js'
import { createWorkerLoop } from '../../src/worker-loop.js'

/** How long a key is kept, and its limits. */
export const IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000
/** How often expired keys are deleted. */
const PRUNE_EVERY_MS = 60 * 60 * 1000

export interface IdempotencyOptions {
  /** how often this instance deletes expired keys (default hourly) */
  pruneEveryMs?: number
}
const MAX_KEY_LENGTH = 255

declare module 'fastify' {
  interface FastifyContextConfig {
    /** the route honours `Idempotency-Key` */
    idempotent?: boolean
  }
  interface FastifyRequest {
    /** set on idempotent routes when the request carries a key not used before */
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
   * Stores the key and its answer in the caller's transaction (the one doing the work), so
   * the work and its recorded answer commit together. Throws `idempotency_key_in_use` when
   * a concurrent duplicate stored the key first, rolling this request's work back.
   */
  complete(tx: Tx, status: number, body: unknown): Promise<StoredAnswer>
  /**
   * The same as one SQL fragment, for handlers that do their work in a single statement:
   * an `INSERT … RETURNING 1` that yields a row only if this request stored the key. Use it
   * as a CTE the work depends on (`with k as (…) insert … select … from k`), so the work
   * happens only if the answer is stored; then call `markStored()`.
   */
  completion(status: number, body: unknown, when?: SQL): { update: SQL; answer: StoredAnswer }
  markStored(): void
  /** for a handler whose `completion` yielded no row: throw this, and the key's holder answers */
  taken(): Error
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

/** SHA-256 of the route, the principal and the canonical JSON body. */
export function fingerprintOf(route: string, principal: Principal, body: unknown): string {
  const who = `${principal.kind}:${principal.orgId}:${principal.userId ?? ''}:${principal.keyId ?? ''}`
  return createHash('sha256')
    .update(`${route}\n${who}\n${canonicalJson(body)}`)
    .digest('hex')
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
  response_status: number | null
  response_body: string | null
  /** retention ended, or an in-flight lock (left by a crashed request) expired */
  free: boolean
}

interface KeyState {
  orgId: string
  route: string
  key: string
  fingerprint: string
  /** the answer was stored (with the work, or on send) */
  stored: boolean
  /** the handler found the key held by another request */
  taken: boolean
}

const keyStates = new WeakMap<FastifyRequest, KeyState>()

/**
 * Stores the answer as `done`, unless a live row holds the key (or `when` does not hold):
 * `returning 1` tells which.
 */
function storeAnswer(state: KeyState, status: number, payload: string, when?: SQL): SQL {
  const values = sql`${state.orgId}, ${state.route}, ${state.key}, ${state.fingerprint}, 'done', null, null,
            now() + make_interval(secs => ${IDEMPOTENCY_RETENTION_MS / 1000}), ${status}, 'application/json', ${payload}`
  return sql`
    insert into idempotency_keys (org_id, route, key, fingerprint, state, lock_token, locked_until, expires_at, response_status, response_type, response_body)
    ${when ? sql`select ${values} where ${when}` : sql`values (${values})`}
    on conflict (org_id, route, key) do update set
      fingerprint = excluded.fingerprint, state = 'done', lock_token = null, locked_until = null,
      expires_at = excluded.expires_at, created_at = now(), response_status = excluded.response_status,
      response_type = excluded.response_type, response_body = excluded.response_body
    where idempotency_keys.expires_at < now()
       or (idempotency_keys.state = 'in_flight' and idempotency_keys.locked_until < now())
    returning 1 as ok`
}

/**
 * The lock a handler (or an MCP tool's work) stores its answer with: the answer is written
 * with the work, and only if no live row holds the key; `state` records what happened.
 */
function lockOf(key: string, state: KeyState): IdempotencyLock {
  const completion = (status: number, body: unknown, when?: SQL) => {
    const payload = JSON.stringify(body)
    return { update: storeAnswer(state, status, payload, when), answer: { status, payload } }
  }
  return {
    key,
    completion,
    markStored() {
      state.stored = true
    },
    taken() {
      state.taken = true
      return idempotencyKeyInUse()
    },
    async complete(tx, status, body) {
      const { update, answer } = completion(status, body)
      if (rowsOf(await tx.execute(update)).length === 0) {
        state.taken = true
        throw idempotencyKeyInUse()
      }
      state.stored = true
      return answer
    }
  }
}

/** The key's row while it is live (kept, and not an expired lock), else undefined. */
async function liveRow(db: Db, state: KeyState): Promise<KeyRow | undefined> {
  const row = rowsOf<KeyRow>(
    await db.execute(sql`
    select fingerprint, state, response_status, response_body,
           (expires_at < now() or (state = 'in_flight' and locked_until < now())) as free
    from idempotency_keys
    where org_id = ${state.orgId} and route = ${state.route} and key = ${state.key}`)
  )[0]
  return row && !row.free ? row : undefined
}

/** What a request with this key gets when `row` holds it (or held it and went away). */
function answerFrom(
  row: KeyRow | undefined,
  state: KeyState
): StoredAnswer & { replayed: boolean; headers?: Record<string, string> | undefined } {
  let refusal: ApiError
  if (row && row.fingerprint !== state.fingerprint) {
    refusal = idempotencyKeyReused()
  } else if (row && row.state === 'done' && row.response_status !== null && row.response_body !== null) {
    return { status: row.response_status, payload: row.response_body, replayed: true }
  } else {
    // still in flight, or it went away meanwhile (expired): the client retries
    refusal = idempotencyKeyInUse()
  }
  const { status, body, headers } = describeError(refusal)
  return { status, payload: JSON.stringify(body), replayed: false, headers }
}

/**
 * Idempotency-Key as one plugin. A route opts in with `config: { idempotent: true }`.
 *
 * The key is written by the handler, as `done` with its answer, in the very statement or
 * transaction that does the work (`request.idempotency.completion` / `complete`), and only
 * if no live row holds it. The common case, a new key, is then one durable commit and no
 * extra round trip; that is most of the dispatch path's cost on real Postgres
 * (bench/runs.ts). When a live row holds the key (a retry, a reused key, a concurrent
 * duplicate that committed first), the guarded write yields nothing, the work rolls back,
 * and the onSend hook answers from the stored row instead: the replay byte for byte,
 * `409 idempotency_key_reused`, or `409 idempotency_key_in_use` while that row is still in
 * flight. Concurrent duplicates race on the key's primary key; exactly one wins.
 *
 * So a handler must do all its work in the transaction that stores the answer; work
 * outside the database would need a lock taken first. Answers the handler did not store
 * that way are stored on send when they are 4xx; 5xx store nothing. Failures before the
 * handler (validation, auth) never reach this plugin's hooks' writes. Rows in state
 * `in_flight` (from an instance of an earlier release, which locked the key first) are
 * honoured as in flight until their lock expires.
 */
export default fp(
  async function idempotencyPlugin(app: FastifyInstance, opts: IdempotencyOptions) {
    app.decorateRequest('idempotency', null)
    // the plugin keeps its table: every instance deletes expired keys now and then (idempotent),
    // drained at shutdown like every background job
    const pruneEveryMs = opts.pruneEveryMs ?? PRUNE_EVERY_MS
    const pruner = createWorkerLoop<never>({
      name: 'idempotency: pruning expired keys',
      log: app.log,
      pollMs: pruneEveryMs,
      every: [{ everyMs: pruneEveryMs, job: () => pruneIdempotencyKeys(app.db) }]
    })
    app.addHook('onReady', async () => pruner.start())
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the idempotency key pruner', (ms) => pruner.stop(ms))
    })

    // A preHandler (after validation and auth, so those failures use nothing up) with no
    // database work: the key is checked when the handler writes it.
    function idempotencyGate(request: FastifyRequest, _reply: FastifyReply, done: (err?: Error) => void) {
      const header = request.headers['idempotency-key']
      if (header === undefined) return done()
      const key = Array.isArray(header) ? header.join(',') : header
      if (key.trim() === '' || key.length > MAX_KEY_LENGTH) {
        return done(invalidIdempotencyKey(MAX_KEY_LENGTH))
      }
      const principal = principalOf(request)
      const route = `${request.method} ${request.url.split('?')[0]}`
      const state: KeyState = {
        orgId: principal.orgId,
        route,
        key,
        fingerprint: fingerprintOf(route, principal, request.body ?? null),
        stored: false,
        taken: false
      }
      keyStates.set(request, state)
      request.idempotency = lockOf(key, state)
      done()
    }

    // Every answer the handler did not store with its work ends here: a 4xx is stored (so a
    // retry gets it again) unless the key turns out to be held; a held key (or a 5xx while
    // it is) is answered from the stored row, as a retry would be. A 429 (a full run queue)
    // is a rate limit: never stored, it uses nothing up.
    async function idempotencyRecord(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
      const state = keyStates.get(request)
      if (!state || state.stored) return payload
      state.stored = true
      const status = reply.statusCode
      const passing = status >= 500 || status === 429
      let row: KeyRow | undefined
      try {
        if (!state.taken && !passing && status >= 400 && status < 500 && typeof payload === 'string') {
          if (rowsOf(await app.db.execute(storeAnswer(state, status, payload))).length === 1) return payload
        }
        row = await liveRow(app.db, state)
      } catch (err) {
        // the database went away: the answer stays unstored, and a retry with
        // the key does the work again or gets the stored answer. The handler's own refusal
        // (or 5xx) stands; a held key cannot be answered from its row, so 503
        if (!isDatabaseUnavailable(err)) throw err
        if (passing || (status >= 400 && !state.taken)) return payload
        const { status: unavailable, body, headers } = describeError(err as Error)
        reply.code(unavailable).type('application/json; charset=utf-8')
        if (headers) reply.headers(headers)
        return JSON.stringify(body)
      }
      if (!state.taken && passing && !row) return payload
      const answer = answerFrom(row, state)
      reply.code(answer.status).type('application/json; charset=utf-8')
      if (answer.replayed) reply.header('idempotent-replayed', 'true')
      if (answer.headers) reply.headers(answer.headers)
      return answer.payload
    }

    // Only the routes that opt in carry these hooks, so every other route pays nothing for
    // idempotency. Route-level hooks run after the scope's, so the gate still comes after
    // authentication and validation.
    app.addHook('onRoute', (route) => {
      if (!route.config?.idempotent) return
      route.preHandler = [...asList(route.preHandler), idempotencyGate]
      route.onSend = [...asList(route.onSend), idempotencyRecord as never]
    })
  },
  { name: 'idempotency', fastify: '5.x', dependencies: ['db', 'errors', 'principal', 'shutdown-refusals'] }
)

/** Deletes keys past their retention; returns how many went. */
export async function pruneIdempotencyKeys(db: Db): Promise<number> {
  const result = await db.execute(sql`
    with gone as (delete from idempotency_keys where expires_at < now() returning 1)
    select count(*)::int as n from gone`)
  return rowsOf<{ n: number }>(result)[0]?.n ?? 0
}

/**
 * Idempotency-Key for work that is not an HTTP request of its own (a tool call of /api/mcp that
 * starts a run): `work` gets a lock to store its answer with, as a route's handler does;
 * a repeat of the key gets the first answer back (`replayed`), a key used with another
 * body `409 idempotency_key_reused`, one still in flight `409 idempotency_key_in_use`
 * (both as stored answers). A 4xx thrown by `work` is stored as its answer too.
 */
export async function idempotentWork(
  db: Db,
  input: { orgId: string; route: string; key: string; principal: Principal; body: unknown },
  work: (lock: IdempotencyLock) => Promise<StoredAnswer>
): Promise<StoredAnswer & { replayed: boolean }> {
  const state: KeyState = {
    orgId: input.orgId,
    route: input.route,
    key: input.key,
    fingerprint: fingerprintOf(input.route, input.principal, input.body ?? null),
    stored: false,
    taken: false
  }
  const lock = lockOf(input.key, state)
  try {
    return { ...(await work(lock)), replayed: false }
  } catch (err) {
    // as on send: a 4xx is the answer to keep, except a rate limit (429), which uses nothing up
    const refusal =
      err instanceof ApiError && err.statusCode >= 400 && err.statusCode < 500 && err.statusCode !== 429 && !state.taken
        ? describeError(err)
        : null
    if (refusal) {
      const payload = JSON.stringify(refusal.body)
      if (rowsOf(await db.execute(storeAnswer(state, refusal.status, payload))).length === 1) throw err
    } else if (!state.taken) throw err
    const answer = answerFrom(await liveRow(db, state), state)
    return { status: answer.status, payload: answer.payload, replayed: answer.replayed }
  }
}
