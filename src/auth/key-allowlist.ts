/**
 * What an API key may reach is declared by each route, in its own options:
 * `config: { keyAccess: … }` beside its `scope`. A key is deny-by-default: a route whose
 * `keyAccess` is `none` answers a key `401 unauthorized` (the key lane never falls back to
 * the session). The list of what keys may call (`keyAllowlist`) is read from the
 * registered routes, so it cannot drift from them.
 *
 * Every non-public /api route must declare it: the principal plugin refuses to register a
 * route that does not (the app does not start), and test/routes.test.ts calls every route
 * with a key to check that it answers as declared. What a key is for decides the value:
 * integrations dispatch runs, decide a run's waiting tool calls, and read; they never
 * configure the org, mint keys or use the people's workbench (terminal, desktop, drafts,
 * proposals, uploads, old versions).
 */
export const KEY_ACCESS = [
  /** a read path an integration needs (GET, and HEAD with it) */
  'read',
  /** starting or cancelling a run, or the MCP session an integration does that through */
  'dispatch',
  /** deciding a run's tool call that waits for a person (recorded as the key) */
  'decide',
  /** for people only: a key gets 401 */
  'none'
] as const

export type KeyAccess = (typeof KEY_ACCESS)[number]

declare module 'fastify' {
  interface FastifyContextConfig {
    /** what an API key may do on this route (required on every non-public /api route) */
    keyAccess?: KeyAccess
  }
}

/** May an API key call a route with this config? */
export function keyMayCall(config: { keyAccess?: KeyAccess | undefined } | undefined): boolean {
  const access = config?.keyAccess
  return access !== undefined && access !== 'none'
}

/**
 * What is wrong with a route's declared key access, or null: undeclared or unknown, a
 * `read` on a write, or a write's access on a read.
 */
export function keyAccessProblem(method: string, url: string, access: unknown): string | null {
  const name = `${method} ${url}`
  if (access === undefined) {
    return `${name} declares no API-key access: add config.keyAccess (${KEY_ACCESS.join(', ')}; src/auth/key-allowlist.ts)`
  }
  if (!(KEY_ACCESS as readonly unknown[]).includes(access)) {
    return `${name} declares an unknown keyAccess ${JSON.stringify(access)} (one of ${KEY_ACCESS.join(', ')})`
  }
  const reads = method === 'GET' || method === 'HEAD'
  if (access === 'read' && !reads) return `${name} is a write: keyAccess 'read' is for GET routes`
  if ((access === 'dispatch' || access === 'decide') && reads) {
    return `${name} is a read: keyAccess '${access}' is for writes (use 'read')`
  }
  return null
}

/** Every `METHOD /api/pattern` an API key may call, sorted, read from the registered routes (HEAD follows GET). */
export function keyAllowlist(
  routes: ReadonlyArray<{ method: string; url: string; config: { keyAccess?: KeyAccess | undefined } }>
): string[] {
  const names = routes
    .filter((r) => r.method !== 'HEAD' && r.url.startsWith('/api') && keyMayCall(r.config))
    .map((r) => `${r.method} ${r.url}`)
  return [...new Set(names)].sort()
}
