import { createHash } from 'node:crypto'
import { LRUCache } from 'lru-cache'

/** Why calls to a provider fail at once right now, and for how much longer. */
export interface BreakerOpen {
  cause: string
  retryAfterMs: number
}

interface BreakerState {
  cause: string
  openUntil: number
  /** a call is trying the provider again after the breaker's time ran out */
  trying: boolean
}

/**
 * A circuit breaker per model provider (its protocol, base URL and key), shared by every model call of the
 * instance: runs, chat, Slack threads, automations, memory extraction. Once a call gave up on a provider it could
 * not reach (its retries spent), calls to it fail at once for `openMs`, saying why, without a request; then one
 * call tries it again (the others still fail at once): an answer closes the breaker, another failure opens it
 * again.
 */
export class ModelBreakers {
  private readonly states = new LRUCache<string, BreakerState>({ max: 10_000 })

  readonly openMs: number
  private readonly now: () => number

  constructor(openMs: number, now: () => number = Date.now) {
    this.openMs = openMs
    this.now = now
  }

  /** The breaker of one provider connection: its key is never kept, only a hash of it. */
  static key(protocol: string, baseUrl: string, apiKey: string | undefined): string {
    const secret = apiKey ? createHash('sha256').update(apiKey).digest('base64url').slice(0, 16) : '-'
    return `${protocol} ${baseUrl} ${secret}`
  }

  /**
   * Whether a call may go to the provider: null when it may (the breaker is closed, or this call is the one that
   * tries again), else why not and for how long.
   */
  admit(key: string): BreakerOpen | null {
    const state = this.states.get(key)
    if (!state || this.openMs === 0) return null
    const left = state.openUntil - this.now()
    if (left > 0) return { cause: state.cause, retryAfterMs: left }
    if (state.trying) return { cause: state.cause, retryAfterMs: Math.min(this.openMs, 1000) }
    state.trying = true
    return null
  }

  /** The provider answered (whatever it said): calls go to it again. */
  answered(key: string): void {
    this.states.delete(key)
  }

  /** A call gave up on the provider: calls fail at once for `openMs`. */
  unreachable(key: string, cause: string): void {
    if (this.openMs === 0) return
    this.states.set(key, { cause, openUntil: this.now() + this.openMs, trying: false })
  }

  /** A call that tried again ended without saying anything of the provider (it was cancelled). */
  release(key: string): void {
    const state = this.states.get(key)
    if (state) state.trying = false
  }
}
