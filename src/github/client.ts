import { throttling } from '@octokit/plugin-throttling'
import { RequestError } from '@octokit/request-error'
import { Octokit } from '@octokit/rest'
import type { FastifyBaseLogger } from 'fastify'
import { integrationFailed, notFound, upstreamRateLimited, type ApiError } from '../../plugins/errors.js'

/** Octokit with the throttling plugin: requests of one org queue behind each other's limits. */
const ThrottledOctokit = Octokit.plugin(throttling)
export type GitHubApi = InstanceType<typeof ThrottledOctokit>

export interface GitHubClientOptions {
  /** GITHUB_API_URL */
  baseUrl: string
  /** GITHUB_TIMEOUT_MS: the longest wait for one request */
  timeoutMs: number
  log: FastifyBaseLogger
}

/**
 * An Octokit for one org and token. The throttling plugin's limiter is keyed by the org,
 * so one org's traffic never queues another's. When GitHub says a limit is used up the
 * plugin is told not to wait and retry (it would hold the request for up to an hour):
 * the error comes back at once and the route answers 503 with `Retry-After` instead.
 * Every request gets its own timeout; `signal` (a run's) aborts them all.
 */
export function octokitFor(token: string, orgId: string, opts: GitHubClientOptions, signal?: AbortSignal): GitHubApi {
  const { log, timeoutMs } = opts
  return new ThrottledOctokit({
    auth: token,
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    userAgent: 'cairn',
    throttle: {
      id: orgId,
      onRateLimit: () => false,
      onSecondaryRateLimit: () => false
    },
    log: {
      debug: () => {},
      info: () => {},
      warn: (message: string) => log.warn({ component: 'github' }, message),
      error: (message: string) => log.error({ component: 'github' }, message)
    },
    request: {
      fetch: (url: string, init: RequestInit = {}) => {
        const timeout = AbortSignal.timeout(timeoutMs)
        const signals = [timeout, ...(signal ? [signal] : []), ...(init.signal ? [init.signal] : [])]
        return fetch(url, { ...init, signal: signals.length === 1 ? timeout : AbortSignal.any(signals) })
      }
    }
  })
}

/** The status GitHub answered with, or null when it did not answer (network, timeout, abort). */
export function statusOf(err: unknown): number | null {
  return err instanceof RequestError && err.response !== undefined ? err.status : null
}

/**
 * Seconds until GitHub takes requests again, when the error is its rate limit (primary:
 * 403/429 with `x-ratelimit-remaining: 0` and a reset time; secondary: `retry-after`, or
 * its message); null for any other error.
 */
export function rateLimitWait(err: unknown, now = Date.now()): number | null {
  if (!(err instanceof RequestError) || !err.response || (err.status !== 403 && err.status !== 429)) return null
  const headers = err.response.headers as Record<string, string | number | undefined>
  const retryAfter = Number(headers['retry-after'])
  if (headers['retry-after'] !== undefined && Number.isFinite(retryAfter)) return Math.max(1, Math.ceil(retryAfter))
  if (String(headers['x-ratelimit-remaining']) === '0') {
    const reset = Number(headers['x-ratelimit-reset'])
    return Number.isFinite(reset) ? Math.max(1, Math.ceil(reset - now / 1000)) : 60
  }
  // GitHub documents one minute as the wait when a secondary limit names none
  if (err.status === 429 || /secondary rate limit/i.test(err.message)) return 60
  return null
}

/** GitHub's own sentence for an error (its `message`), cut short; never the token. */
function upstreamMessage(err: RequestError): string {
  const data = err.response?.data as { message?: unknown } | string | undefined
  const text =
    typeof data === 'object' && data !== null && typeof data.message === 'string'
      ? data.message
      : typeof data === 'string'
        ? data
        : ''
  const clean = text.replace(/\s+/g, ' ').trim()
  return clean.length > 200 ? `${clean.slice(0, 200)}…` : clean
}

/**
 * The contract's answer for a GitHub failure: its rate limit is 503 upstream_rate_limited
 * with Retry-After; a 404 (or a status the caller names as "not there", such as 422 for an
 * unknown ref) is 404 not_found with `missing`; anything else is 502 upstream_failed. A 401
 * is the caller's to handle first (the token may be revoked).
 */
export function githubError(
  err: unknown,
  what: string,
  missing: string,
  notThere: readonly number[] = [404]
): ApiError {
  const wait = rateLimitWait(err)
  if (wait !== null) return upstreamRateLimited('GitHub', wait)
  const status = statusOf(err)
  if (status === null) return integrationFailed(`GitHub did not answer the request for ${what}; try again`)
  if (notThere.includes(status)) return notFound(missing)
  const said = upstreamMessage(err as RequestError)
  return integrationFailed(`GitHub answered ${status} to the request for ${what}${said ? `: ${said}` : ''}`)
}

/** A conditional request answered 304 Not Modified. */
export const isNotModified = (err: unknown): boolean => err instanceof RequestError && err.status === 304

/** Whether GitHub's Link header names a next page. */
export const hasNextPage = (link: string | undefined): boolean =>
  link !== undefined && /<[^>]*>;\s*rel="next"/.test(link)
