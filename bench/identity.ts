// What resolving the caller costs. A trivial read route (GET /api/bench/projects)
// called anonymously in the dev org, with a session cookie and with an API key, next to
// the public health route in the same server and run; plus two real identity routes, and
// the same lanes with the identity cache off (a database round trip per request).
import { credentials, interleaved, load, startServer, table, type Result } from './lib.js'

/** The trivial-route lanes are measured in interleaved rounds, best round kept (lib.interleaved). */
async function lanes(env: Record<string, string>, label: string, full: boolean): Promise<Result[]> {
  const server = await startServer('bench/identity-server.ts', { ALLOW_DEV_ORG: 'true', ...env })
  try {
    const { cookie, authorization } = await credentials(server.url)
    const cases: Array<{ url: string; headers: Record<string, string>; name: string }> = [
      ...(full ? [{ url: '/api/health', headers: {}, name: 'GET /api/health (public, baseline)' }] : []),
      ...(full ? [{ url: '/api/bench/projects', headers: {}, name: 'GET /api/projects, anonymous dev org' }] : []),
      { url: '/api/bench/projects', headers: { cookie }, name: `GET /api/projects, session cookie${label}` },
      { url: '/api/bench/projects', headers: { authorization }, name: `GET /api/projects, API key${label}` }
    ]
    const rows = await interleaved(
      cases.map((c) => ({ url: `${server.url}${c.url}`, headers: c.headers, name: c.name }))
    )
    if (full) {
      rows.push(
        await load({
          url: `${server.url}/api/auth/session`,
          headers: { cookie },
          name: 'GET /api/auth/session (user + orgs from the db)'
        })
      )
      rows.push(
        await load({ url: `${server.url}/api/keys`, headers: { cookie }, name: 'GET /api/keys (list from the db)' })
      )
    }
    return rows
  } finally {
    await server.stop()
  }
}

export async function benchIdentity(): Promise<string> {
  const rows = await lanes({}, '', true)
  rows.push(...(await lanes({ IDENTITY_CACHE_MS: '0' }, ', cache off', false)))
  return table(rows, rows[0]!)
}
