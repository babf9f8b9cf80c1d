import { MAX_PROVIDER_MODELS } from '../../schemas/providers.js'
import { ANTHROPIC_VERSION } from '../runs/engines/anthropic.js'
import { refusalIn, type ProviderFetch } from './address-guard.js'

export type ProbeOutcome = { ok: true; models: string[] } | { ok: false; error: string }

/** The largest /models answer read (OpenRouter's full list is well under 1 MiB). */
const MAX_MODELS_BYTES = 4 * 1024 * 1024

/** Reads a body as text, up to `limit` bytes; null when it is longer. */
async function textUpTo(res: Response, limit: number): Promise<string | null> {
  if (!res.body) return ''
  const chunks: Uint8Array[] = []
  let size = 0
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength
    if (size > limit) {
      await res.body.cancel().catch(() => {})
      return null
    }
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}

const validId = (id: unknown): id is string =>
  typeof id === 'string' && id.length > 0 && id.length <= 200 && id.trim() === id

/** The check's sentence for a request that got no HTTP answer. */
function unreachable(err: unknown, url: URL, timeoutMs: number, timedOut: boolean, path: string): string {
  if (timedOut) return `the provider did not answer ${path} within ${timeoutMs / 1000} s`
  const refused = refusalIn(err)
  if (refused) return `${refused.message}; provider requests may not go there`
  let cause: unknown = err
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause
  const code = (cause as NodeJS.ErrnoException | undefined)?.code
  const where = url.host
  if (code === 'ECONNREFUSED') return `nothing accepts connections at ${where} (connection refused); check the base URL`
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME')
    return `${url.hostname} does not resolve; check the base URL`
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return `${where} closed the connection before answering`
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') return `could not connect to ${where} in time`
  if (typeof code === 'string' && (code.startsWith('ERR_TLS') || code.includes('CERT') || code.startsWith('ERR_SSL')))
    return `the TLS connection to ${where} failed (${code})`
  const message = cause instanceof Error ? cause.message : String(cause)
  if (/redirect/i.test(message))
    return `the provider answered ${path} with a redirect, which provider requests do not follow; use the final URL as the base URL`
  return `could not reach the provider at ${where}: ${message}`
}

/**
 * `POST /api/providers/:id/check`: GET the models list with the key (`<baseUrl>/models` with
 * a bearer token for openai, `<baseUrl>/v1/models` with `x-api-key` for anthropic: both
 * answer `{data: [{id}]}`). A 401 or 403 is the key, a 404 the URL; anything else that is
 * not a models list says what it was.
 */
export async function probeModels(
  fetch: ProviderFetch,
  kind: 'openai' | 'anthropic',
  baseUrl: string,
  apiKey: string | null,
  timeoutMs: number
): Promise<ProbeOutcome> {
  const url = new URL(kind === 'anthropic' ? `${baseUrl}/v1/models` : `${baseUrl}/models`)
  const signal = AbortSignal.timeout(timeoutMs)
  const auth: Record<string, string> = !apiKey
    ? {}
    : kind === 'anthropic'
      ? { 'x-api-key': apiKey, 'anthropic-version': ANTHROPIC_VERSION }
      : { authorization: `Bearer ${apiKey}` }
  const path = kind === 'anthropic' ? 'GET /v1/models' : 'GET /models'
  const hint =
    kind === 'anthropic'
      ? 'the Anthropic API origin, without /v1, e.g. https://api.anthropic.com'
      : 'the OpenAI-compatible API, e.g. …/v1'
  let res: Response
  try {
    res = await fetch(url.toString(), { headers: { accept: 'application/json', ...auth }, signal })
  } catch (err) {
    return { ok: false, error: unreachable(err, url, timeoutMs, signal.aborted, path) }
  }
  try {
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel()
      return { ok: false, error: `the provider refused the API key (HTTP ${res.status} from ${path}); check the key` }
    }
    if (res.status === 404) {
      await res.body?.cancel()
      return {
        ok: false,
        error: `the provider has no models list at ${url.toString()} (HTTP 404); check the base URL (${kind === 'anthropic' ? 'the Anthropic API origin, without /v1' : 'OpenAI-compatible APIs usually end in /v1'})`
      }
    }
    if (!res.ok) {
      await res.body?.cancel()
      return { ok: false, error: `the provider answered HTTP ${res.status} to ${path}` }
    }
    const text = await textUpTo(res, MAX_MODELS_BYTES)
    if (text === null)
      return { ok: false, error: `the provider's models list is larger than ${MAX_MODELS_BYTES / 1024 / 1024} MiB` }
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      return {
        ok: false,
        error: `the provider's ${path} answer is not JSON; check the base URL (it should be ${hint})`
      }
    }
    const data = (body as { data?: unknown } | null)?.data
    if (!Array.isArray(data))
      return {
        ok: false,
        error: `the provider's ${path} answer is not a models list ({"data": [{"id": …}]}); check the base URL`
      }
    const ids = [...new Set(data.map((m) => (m as { id?: unknown } | null)?.id).filter(validId))].slice(
      0,
      MAX_PROVIDER_MODELS
    )
    return { ok: true, models: ids }
  } catch (err) {
    return { ok: false, error: unreachable(err, url, timeoutMs, signal.aborted, path) }
  }
}
