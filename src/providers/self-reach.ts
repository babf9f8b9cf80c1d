import { lookup } from 'node:dns/promises'
import { networkInterfaces } from 'node:os'
import ipaddr from 'ipaddr.js'

/**
 * Cairn never reaches itself through a URL an org typed (an MCP server, a model provider):
 * a request the service makes to its own API would act for the service, not for the org
 * that typed the URL. With the dev org on, a request from loopback without credentials
 * acts in the dev org, so an org that could point Cairn at its own `/api/mcp` would read
 * the dev org's data.
 *
 * Two walls:
 * - the addresses the service listens on are refused whatever PROVIDER_ALLOW_PRIVATE says:
 *   a host:port where the port is one this process listens on and the address is this
 *   machine's (loopback, unspecified, or any address of its interfaces), and the configured
 *   public URL's host and port. They are judged when a URL is registered and again at every
 *   connection, on the address the socket actually reached (names can change what they resolve to);
 * - every request those URLs receive carries `SELF_HEADER`, and a request that carries it
 *   never acts in the dev org (src/auth/principal.ts): whatever route it takes back here,
 *   it is anonymous. Its presence decides, not its value, so it needs no secret: a third party
 *   that sees it can only make its own requests lose dev-org access.
 */

/** The header every request to an org's MCP server or provider carries. */
export const SELF_HEADER = 'x-cairn-outbound'
export const SELF_HEADER_VALUE = '1'

/** The endpoints this process listens on (every app instance in it), by a key per registration. */
const listening = new Map<symbol, () => Array<{ address: string; port: number }>>()
/**
 * The public URLs of this process's instances: their hosts, ports, and the addresses the
 * hosts resolved to when last asked (`refreshPublicAddresses`), canonical.
 */
const publicOrigins = new Map<symbol, { host: string; port: number; addresses: Set<string> }>()

/** A URL's host without brackets and trailing dot, lower case. */
const bare = (hostname: string) =>
  hostname
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase()

/** An address without brackets, zone and IPv4-mapping, in its canonical form; null when not an IP. */
function canonical(text: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  try {
    return ipaddr.process(text.replace(/^\[|\]$/g, '').replace(/%.*$/, ''))
  } catch {
    return null
  }
}

/** Whether an address is this machine's: loopback, unspecified, or one of its interfaces' addresses. */
function isLocalAddress(addr: ipaddr.IPv4 | ipaddr.IPv6): boolean {
  const range = addr.range()
  if (range === 'loopback' || range === 'unspecified') return true
  const shown = addr.toString()
  for (const entries of Object.values(networkInterfaces())) {
    for (const entry of entries ?? []) {
      if (canonical(entry.address)?.toString() === shown) return true
    }
  }
  return false
}

/** The default port of a URL's protocol when it names none. */
export function portOf(url: URL): number {
  if (url.port !== '') return Number(url.port)
  return url.protocol === 'https:' ? 443 : 80
}

/**
 * Records one app instance as this service: where it listens (asked when a URL is judged:
 * nothing before it listens, every address after), and its public URL if it has one. The
 * returned function forgets it (when the instance closes).
 */
export function registerSelf(
  addresses: () => Array<{ address: string; port: number }>,
  publicUrl?: string | undefined
): () => void {
  const key = Symbol('cairn instance')
  listening.set(key, addresses)
  if (publicUrl) {
    const url = new URL(publicUrl)
    const host = bare(url.hostname)
    const literal = canonical(host)
    publicOrigins.set(key, { host, port: portOf(url), addresses: new Set(literal ? [literal.toString()] : []) })
    void refreshPublicAddresses()
  }
  return () => {
    listening.delete(key)
    publicOrigins.delete(key)
  }
}

/**
 * Null when a connection to this address and port does not reach this service, else the
 * sentence saying it does. The address is an IP literal (what a name resolved to, or what
 * a socket connected to).
 */
export function selfAddress(address: string, port: number): string | null {
  const addr = canonical(address)
  if (!addr) return null
  let ours = false
  for (const endpoints of listening.values()) {
    if (endpoints().some((e) => e.port === port)) ours = true
  }
  if (ours && isLocalAddress(addr)) return `${addr.toString()} port ${port} is this Cairn server's own address`
  for (const origin of publicOrigins.values()) {
    if (origin.port === port && origin.addresses.has(addr.toString()))
      return `${addr.toString()} port ${port} is this Cairn server's public address`
  }
  return null
}

/**
 * Resolves the public URLs' names again (a URL is judged against what they resolve to now;
 * a connection, against what they resolved to when last asked). A name that does not
 * resolve keeps what it resolved to before.
 */
export async function refreshPublicAddresses(): Promise<void> {
  await Promise.all(
    [...publicOrigins.values()]
      .filter((origin) => canonical(origin.host) === null)
      .map(async (origin) => {
        try {
          const found = await lookup(origin.host, { all: true, verbatim: true })
          origin.addresses = new Set(found.flatMap(({ address }) => canonical(address)?.toString() ?? []))
        } catch {
          // unresolvable now: what it resolved to before still counts
        }
      })
  )
}

/** Null when a URL's host (a name, before any lookup) and port are not this service's public URL, else why. */
export function selfName(hostname: string, port: number): string | null {
  const host = bare(hostname)
  for (const origin of publicOrigins.values()) {
    if (origin.host === host && origin.port === port) return `${host}:${port} is this Cairn server's public address`
  }
  return null
}
