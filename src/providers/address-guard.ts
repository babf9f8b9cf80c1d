import { validationFailed } from '../../plugins/errors.js'
import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { lookup as dnsLookupAsync } from 'node:dns/promises'
import type { LookupFunction } from 'node:net'
import ipaddr from 'ipaddr.js'
import { Agent, buildConnector, fetch as undiciFetch } from 'undici'
import { portOf, refreshPublicAddresses, SELF_HEADER, SELF_HEADER_VALUE, selfAddress, selfName } from './self-reach.js'

/**
 * The SSRF guard of provider connections. A provider's base URL is typed by
 * an org admin, and the service then makes requests to it from inside the deployment, so
 * the addresses it may reach are limited:
 * - never: link-local (169.254/16, fe80::/10: cloud metadata lives there), the known cloud
 *   metadata addresses and names, multicast and broadcast;
 * - unless PROVIDER_ALLOW_PRIVATE=true: loopback, private (RFC 1918, fc00::/7), CGNAT,
 *   unspecified, and every other special-purpose range (reserved, benchmarking, …);
 * IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are
 * judged by that IPv4 address. Every address a name resolves to must pass, and requests
 * connect only through `providerFetch`, whose agent checks the address it is about to
 * connect to (so a name that re-resolves to 127.0.0.1 later, DNS rebinding, is refused).
 * Whatever PROVIDER_ALLOW_PRIVATE says, the service's own listening addresses and public URL
 * are refused too (src/providers/self-reach.ts): at registration, and on the address each
 * connection actually reached.
 */

/** Cloud metadata services, refused whatever PROVIDER_ALLOW_PRIVATE says. */
const METADATA_ADDRESSES = new Set([
  '169.254.169.254', // AWS, GCP, Azure, Oracle, DigitalOcean, OpenStack
  '169.254.170.2', // AWS ECS task metadata
  '100.100.100.200', // Alibaba Cloud
  '168.63.129.16', // Azure wire server
  '192.0.0.192', // Oracle Cloud (classic)
  'fd00:ec2::254', // AWS IMDS over IPv6
  'fd20:ce::254' // GCP metadata over IPv6
])
const METADATA_NAMES = new Set([
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'instance-data',
  'instance-data.ec2.internal',
  'metadata.azure.internal'
])

/** A v4 address's range name for people. */
const RANGE_WORDS: Record<string, string> = {
  linkLocal: 'a link-local address',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  loopback: 'a loopback address',
  private: 'a private address',
  uniqueLocal: 'a private (unique local) address',
  carrierGradeNat: 'a carrier-grade NAT address',
  unspecified: 'the unspecified address',
  reserved: 'a reserved address',
  benchmarking: 'a benchmarking address',
  deprecatedSiteLocal: 'a site-local address',
  teredo: 'a Teredo tunnel address',
  discard: 'a discard-only address'
}
const ALWAYS_REFUSED = new Set(['linkLocal', 'multicast', 'broadcast'])

export type AddressVerdict = { ok: true } | { ok: false; reason: string; always: boolean }

/** The IPv4 address an IPv6 one carries, when it is one of the forms that do. */
function embeddedV4(v6: ipaddr.IPv6): ipaddr.IPv4 | null {
  const p = v6.parts
  const range = v6.range()
  const fromWords = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff])
  if (range === 'ipv4Mapped') return v6.toIPv4Address()
  if (range === 'rfc6145' || (range === 'rfc6052' && p[2] === 0)) return fromWords(p[6]!, p[7]!)
  if (range === '6to4') return fromWords(p[1]!, p[2]!)
  // IPv4-compatible (::a.b.c.d, deprecated): everything but the last 32 bits is zero
  if (p.slice(0, 6).every((x) => x === 0) && (p[6] !== 0 || p[7]! > 1)) return fromWords(p[6]!, p[7]!)
  return null
}

/** Whether a provider may be reached at this address (an IP literal, v4 or v6). */
export function classifyAddress(text: string, allowPrivate: boolean): AddressVerdict {
  let addr: ipaddr.IPv4 | ipaddr.IPv6
  try {
    addr = ipaddr.parse(text.replace(/^\[|\]$/g, '').replace(/%.*$/, ''))
  } catch {
    return { ok: false, reason: 'not an IP address', always: true }
  }
  const shown = addr.toString()
  if (METADATA_ADDRESSES.has(shown)) return { ok: false, reason: `${shown} is a cloud metadata address`, always: true }
  if (addr.kind() === 'ipv6') {
    const v4 = embeddedV4(addr as ipaddr.IPv6)
    if (v4) {
      const inner = classifyAddress(v4.toString(), allowPrivate)
      return inner.ok
        ? inner
        : { ...inner, reason: `${shown} carries the IPv4 address ${v4.toString()}: ${inner.reason}` }
    }
  }
  const range = addr.range()
  if (range === 'unicast') return { ok: true }
  const words = RANGE_WORDS[range] ?? `a special-purpose address (${range})`
  if (ALWAYS_REFUSED.has(range)) return { ok: false, reason: `${shown} is ${words}`, always: true }
  if (allowPrivate) return { ok: true }
  return {
    ok: false,
    reason: `${shown} is ${words} (PROVIDER_ALLOW_PRIVATE=true allows loopback and private addresses)`,
    always: false
  }
}

/** A URL hostname without brackets and trailing dot, lower case. */
const bareHost = (hostname: string) =>
  hostname
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase()

/** Refused before any lookup: a metadata name. */
function refusedName(host: string): string | null {
  return METADATA_NAMES.has(host) ? `${host} is a cloud metadata host` : null
}

/** An address (or name) a provider request may not reach; the message is for people. */
export class AddressRefused extends Error {
  override name = 'AddressRefused'
  readonly code = 'PROVIDER_ADDRESS_REFUSED'
}

/** The host does not resolve (ENOTFOUND, EAI_AGAIN…). */
export class HostUnresolved extends Error {
  override name = 'HostUnresolved'
}

/**
 * Resolves a base URL's host (every address) and judges each: null when it may be used,
 * else the sentence saying why not. With `port`, an address where this service itself
 * listens on that port is refused too. Throws HostUnresolved when the name does not resolve.
 */
export async function checkHost(hostname: string, allowPrivate: boolean, port?: number): Promise<string | null> {
  const host = bareHost(hostname)
  const judge = (address: string): string | null => {
    if (port !== undefined) return literalRefusal(address, port, allowPrivate)
    const verdict = classifyAddress(address, allowPrivate)
    return verdict.ok ? null : verdict.reason
  }
  // the public URL's name is resolved now too: a URL is judged against where it points today
  if (port !== undefined) await refreshPublicAddresses()
  if (ipaddr.isValid(host)) return judge(host)
  const named = refusedName(host) ?? (port === undefined ? null : selfName(host, port))
  if (named) return named
  let addresses: LookupAddress[]
  try {
    addresses = await dnsLookupAsync(host, { all: true, verbatim: true })
  } catch (err) {
    throw new HostUnresolved(`${host} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'lookup failed'})`)
  }
  if (addresses.length === 0) throw new HostUnresolved(`${host} does not resolve`)
  for (const { address } of addresses) {
    const refused = judge(address)
    if (refused) return `${host} resolves to ${refused}`
  }
  return null
}

/**
 * net.connect's `lookup` for provider connections: resolves as usual, then refuses the
 * connection when any address the name resolves to is one providers may not reach.
 */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    const host = bareHost(hostname)
    const named = refusedName(host)
    if (named) return void callback(new AddressRefused(named), '', 0)
    dnsLookup(
      hostname,
      { family: options.family ?? 0, hints: options.hints ?? 0, all: true, verbatim: true },
      (err, addresses) => {
        if (err) return void callback(err, '', 0)
        for (const { address } of addresses) {
          const verdict = classifyAddress(address, allowPrivate)
          if (!verdict.ok) return void callback(new AddressRefused(`${host} resolves to ${verdict.reason}`), '', 0)
        }
        if (options.all) return void (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses)
        const first = addresses[0]
        if (!first)
          return void callback(Object.assign(new Error(`${host} does not resolve`), { code: 'ENOTFOUND' }), '', 0)
        callback(null, first.address, first.family)
      }
    )
  }
}

/** Why an IP-literal host and port may not be reached, or null. */
function literalRefusal(host: string, port: number, allowPrivate: boolean): string | null {
  const self = selfAddress(host, port)
  if (self) return self
  const verdict = classifyAddress(host, allowPrivate)
  return verdict.ok ? null : verdict.reason
}

export type ProviderFetch = (url: string, init: RequestInit) => Promise<Response>

/**
 * The only way requests reach a provider: an agent whose connections go through
 * `guardedLookup`, IP-literal hosts judged here (they are never looked up), each connection
 * checked on the address and port it reached before a byte is sent (never this service
 * itself), no redirects followed (a redirect could name any address), and every request
 * marked with SELF_HEADER (a request that comes back here never acts in the dev org).
 */
export function providerFetcher(allowPrivate: boolean): { fetch: ProviderFetch; close(): Promise<void> } {
  const connector = buildConnector({ lookup: guardedLookup(allowPrivate) })
  const agent = new Agent({
    connect(options, callback) {
      connector(options, (err, socket) => {
        if (err) return callback(err, null)
        const refused = selfAddress(socket.remoteAddress ?? '', socket.remotePort ?? 0)
        if (!refused) return callback(null, socket)
        socket.destroy()
        callback(new AddressRefused(`${bareHost(options.hostname)} reaches ${refused}`), null)
      })
    }
  })
  return {
    async fetch(url, init) {
      const target = new URL(url)
      const host = bareHost(target.hostname)
      const refused = ipaddr.isValid(host)
        ? literalRefusal(host, portOf(target), allowPrivate)
        : selfName(host, portOf(target))
      if (refused) throw new TypeError('fetch failed', { cause: new AddressRefused(refused) })
      // the caller's headers (an org's own among them) never take the marker off
      const headers = new Headers(init.headers)
      headers.set(SELF_HEADER, SELF_HEADER_VALUE)
      const res = await undiciFetch(url, {
        ...(init as Record<string, unknown>),
        headers,
        dispatcher: agent,
        redirect: 'error'
      } as Parameters<typeof undiciFetch>[1])
      return res as unknown as Response
    },
    close: () => agent.destroy()
  }
}

/** The AddressRefused somewhere in an error's cause chain, if any. */
export function refusalIn(err: unknown): AddressRefused | null {
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof AddressRefused) return e
  }
  return null
}

/**
 * A request body's URL checked like checkHost: `400 validation_failed` naming `path` when its
 * host cannot be resolved, or resolves where `what` may not be reached.
 */
export async function guardUrl(url: string, allowPrivate: boolean, path: string, what: string): Promise<void> {
  let refused: string | null
  try {
    const target = new URL(url)
    refused = await checkHost(target.hostname, allowPrivate, portOf(target))
  } catch (err) {
    if (err instanceof HostUnresolved) throw validationFailed([{ path, message: `${err.message}; check the URL` }])
    throw err
  }
  if (refused) throw validationFailed([{ path, message: `${refused}; ${what} may not be reached there` }])
}

/**
 * A URL an org admin typed for the service to call (a provider's base URL, an MCP server):
 * absolute http(s), naming a host, without credentials (they travel as a key or headers,
 * never in a URL that is stored and shown) or a fragment, and without a query where
 * `query` is false; or the 400 saying what is wrong with the field at `path`.
 */
export function typedHttpUrl(
  raw: string,
  { path, credentialsGo, query }: { path: string; credentialsGo: string; query: boolean }
): URL {
  const refuse = (message: string) => validationFailed([{ path, message }])
  let url: URL
  try {
    url = new URL(raw.trim())
  } catch {
    throw refuse('must be an absolute http(s) URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw refuse('must be an http or https URL')
  if (url.username !== '' || url.password !== '') throw refuse(`must not carry credentials; ${credentialsGo}`)
  if (!query && url.search !== '') throw refuse('must not have a query or a fragment')
  if (url.hash !== '') throw refuse(query ? 'must not have a fragment' : 'must not have a query or a fragment')
  if (url.hostname === '') throw refuse('must name a host')
  return url
}
