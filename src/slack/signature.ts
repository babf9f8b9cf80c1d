import { createHmac, timingSafeEqual } from 'node:crypto'

/** Slack's window: a request signed more than this before or after now is refused (replays). */
export const SIGNATURE_WINDOW_SECONDS = 300

/**
 * Slack's v0 request signature ("Verifying requests from Slack"): `v0=` and the hex
 * HMAC-SHA256, keyed by the app's signing secret, of `v0:<X-Slack-Request-Timestamp>:<body>`,
 * the body as the raw bytes received.
 */
export function slackSignature(signingSecret: string, timestamp: string, rawBody: Buffer | string): string {
  const hmac = createHmac('sha256', signingSecret)
  hmac.update(`v0:${timestamp}:`)
  hmac.update(rawBody)
  return `v0=${hmac.digest('hex')}`
}

/**
 * Whether the timestamp header is a Unix time in seconds within the window of `now`, both
 * ways (a timestamp from the future is as suspect as an old one).
 */
export function freshTimestamp(timestamp: string, now: Date, windowSeconds = SIGNATURE_WINDOW_SECONDS): boolean {
  if (!/^\d{1,12}$/.test(timestamp)) return false
  return Math.abs(Math.floor(now.getTime() / 1000) - Number(timestamp)) <= windowSeconds
}

/**
 * The signature header against the one the secret gives, in constant time (after a length check, which reveals nothing
 * secret).
 */
export function signatureMatches(
  signingSecret: string,
  timestamp: string,
  rawBody: Buffer | string,
  signature: string
): boolean {
  const expected = Buffer.from(slackSignature(signingSecret, timestamp, rawBody), 'utf8')
  const given = Buffer.from(signature, 'utf8')
  return given.length === expected.length && timingSafeEqual(given, expected)
}

/** Both checks: a fresh timestamp and a matching signature. */
export function verifySlackRequest(o: {
  signingSecret: string
  timestamp: string
  signature: string
  rawBody: Buffer | string
  now: Date
}): boolean {
  return freshTimestamp(o.timestamp, o.now) && signatureMatches(o.signingSecret, o.timestamp, o.rawBody, o.signature)
}
