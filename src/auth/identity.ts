import type { Db } from '../db/client.js'
import { findLiveKey, LAST_USED_GRANULARITY_MS, touchKey } from './api-keys-repo.js'
import { extendSession, findSession, SESSION_REFRESH_MS, type SessionRecord } from './sessions-repo.js'
import { API_KEY_PATTERN, hashSecret, sameHash, SESSION_TOKEN_PATTERN } from './tokens.js'

interface Cached<T> {
  value: T
  until: number
}

export interface ResolvedKey {
  id: string
  orgId: string
}

export interface ResolvedSession extends SessionRecord {
  /** true when this lookup slid the expiry forward (the cookie is then re-sent) */
  extended: boolean
}

const MAX_ENTRIES = 10_000

/**
 * An identity change other parts of the service may need to act on (the runtime closes
 * the sockets it opened for that session or membership). Crosses instances as JSON on
 * the identity NOTIFY, so it holds ids only.
 */
export type IdentityChange =
  { kind: 'session-ended'; sessionId: string } | { kind: 'membership-removed'; orgId: string; userId: string }

export type IdentityChangeListener = (change: IdentityChange) => void

/**
 * Turns a session token or an API key into who is calling, with a very short cache.
 *
 * Why a cache at all: a database round trip per request costs more than the 25% of
 * throughput we allow principal resolution on a trivial route. Why it stays correct:
 * - every change made through this instance (sign-out, membership change, org switch,
 *   key revocation) clears it before the response, so the next request here sees it;
 * - other instances hear of the change through `broadcast` (Postgres NOTIFY) and clear
 *   theirs, and an entry never outlives `ttlMs` (default 1 s) even if that is missed;
 * - only positive answers are cached, and an entry holds nothing a client sent but hashes.
 * `ttlMs = 0` turns caching off.
 */
export class IdentityResolver {
  private readonly sessions = new Map<string, Cached<SessionRecord>>()
  private readonly keys = new Map<string, Cached<ResolvedKey>>()
  private readonly keyTouched = new Map<string, number>()

  private readonly db: Db
  private readonly ttlMs: number
  private readonly listeners = new Set<IdentityChangeListener>()
  /** tells other instances to clear their caches (and what changed); set once the channel is open */
  broadcast: (change?: IdentityChange) => Promise<void> = async () => {}

  constructor(db: Db, ttlMs: number) {
    this.db = db
    this.ttlMs = ttlMs
  }

  /** The session behind a cookie token, or null when it is malformed, unknown or expired. */
  async session(token: string): Promise<ResolvedSession | null> {
    if (!SESSION_TOKEN_PATTERN.test(token)) return null
    const id = hashSecret(token)
    const now = Date.now()
    let record = this.fresh(this.sessions, id, now)
    if (!record) {
      record = await findSession(this.db, id)
      if (!record || !sameHash(record.id, id)) return null
      this.remember(this.sessions, id, record, now)
    }
    if (record.expiresAt.getTime() <= now) {
      this.sessions.delete(id)
      return null
    }
    if (record.expiresAt.getTime() - now < SESSION_REFRESH_MS) {
      const expiresAt = await extendSession(this.db, id)
      record = { ...record, expiresAt }
      this.remember(this.sessions, id, record, now)
      return { ...record, extended: true }
    }
    return { ...record, extended: false }
  }

  /** The org behind an API key, or null when it is malformed, unknown or revoked. */
  async key(key: string): Promise<ResolvedKey | null> {
    if (!API_KEY_PATTERN.test(key)) return null
    const hash = hashSecret(key)
    const now = Date.now()
    let resolved = this.fresh(this.keys, hash, now)
    if (!resolved) {
      const row = await findLiveKey(this.db, hash)
      if (!row || !sameHash(row.keyHash, hash)) return null
      resolved = { id: row.id, orgId: row.orgId }
      this.remember(this.keys, hash, resolved, now)
      if (row.lastUsedAt && !this.keyTouched.has(row.id)) this.keyTouched.set(row.id, row.lastUsedAt.getTime())
    }
    const touched = this.keyTouched.get(resolved.id) ?? 0
    if (now - touched >= LAST_USED_GRANULARITY_MS) {
      this.keyTouched.set(resolved.id, now)
      if (this.keyTouched.size > MAX_ENTRIES) this.keyTouched.clear()
      await touchKey(this.db, resolved.id)
    }
    return resolved
  }

  /**
   * Forgets everything here and tells the other instances to do the same. A `change` is
   * applied here at once (before the caller answers) and on every other instance when
   * its notification arrives.
   */
  async invalidate(change?: IdentityChange): Promise<void> {
    this.clear()
    if (change) this.dispatch(change)
    await this.broadcast(change)
  }

  /** Subscribes to identity changes made on any instance; returns the unsubscribe. */
  onChange(listener: IdentityChangeListener): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** Runs the listeners for a change (made here, or heard from another instance). */
  dispatch(change: IdentityChange): void {
    for (const listener of this.listeners) listener(change)
  }

  /** Forgets everything here (what a broadcast from another instance does). */
  clear(): void {
    this.sessions.clear()
    this.keys.clear()
  }

  private fresh<T>(map: Map<string, Cached<T>>, id: string, now: number): T | null {
    const hit = map.get(id)
    if (!hit) return null
    if (hit.until > now) return hit.value
    map.delete(id)
    return null
  }

  private remember<T>(map: Map<string, Cached<T>>, id: string, value: T, now: number): void {
    if (this.ttlMs <= 0) return
    if (map.size >= MAX_ENTRIES) map.clear()
    map.set(id, { value, until: now + this.ttlMs })
  }
}
