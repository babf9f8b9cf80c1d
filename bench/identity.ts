// Issue 3: what resolving the caller costs. A trivial read route (GET /api/projects stand-in)
// called anonymously in the dev org, with a session cookie and with an API key, next to
// the public health route in the same server and run; plus two real identity routes, and
// the same lanes with the identity cache off (a database round trip per request).
import { interleaved, load, startServer, table, type Result } from './lib.js'

async function credentials(url: string): Promise<{ cookie: string; authorization: string }> {
  const json = { 'content-type': 'application/json' }
  const signUp = await fetch(`${url}/api/auth/sign-up`, {
    method: 'POST', headers: json,
    body: JSON.stringify({ email: `bench-${Date.now()}@example.test`, password: 'benchmark password', name: 'Bench' })
  })
  if (signUp.status !== 201) throw new Error(`sign-up: ${signUp.status} ${await signUp.text()}`)
  const cookie = signUp.headers.getSetCookie()[0]!.split(';')[0]!
  const org = await fetch(`${url}/api/auth/organizations`, { method: 'POST', headers: { ...json, cookie }, body: JSON.stringify({ name: 'Bench org' }) })
  if (org.status !== 201) throw new Error(`create org: ${org.status}`)
  const key = await fetch(`${url}/api/keys`, { method: 'POST', headers: { ...json, cookie }, body: JSON.stringify({ name: 'bench' }) })
  if (key.status !== 201) throw new Error(`mint key: ${key.status}`)
  return { cookie, authorization: `Bearer ${(await key.json() as { key: string }).key}` }
}

/** The trivial-route lanes are measured in interleaved rounds, best round kept (lib.interleaved). */
async function lanes(env: Record<string, string>, label: string, full: boolean): Promise<Result[]> {
  const server = await startServer('bench/identity-server.ts', { ALLOW_DEV_ORG: 'true', ...env })
  try {
    const { cookie, authorization } = await credentials(server.url)
    const cases: Array<{ url: string; headers: Record<string, string>; name: string }> = [
      ...(full ? [{ url: '/api/health', headers: {}, name: 'GET /api/health (public, baseline)' }] : []),
      ...(full ? [{ url: '/api/projects', headers: {}, name: 'GET /api/projects, anonymous dev org' }] : []),
      { url: '/api/projects', headers: { cookie }, name: `GET /api/projects, session cookie${label}` },
      { url: '/api/projects', headers: { authorization }, name: `GET /api/projects, API key${label}` }
    ]
    const rows = await interleaved(cases.map((c) => ({ url: `${server.url}${c.url}`, headers: c.headers, name: c.name })))
    if (full) {
      rows.push(await load({ url: `${server.url}/api/auth/session`, headers: { cookie }, name: 'GET /api/auth/session (user + orgs from the db)' }))
      rows.push(await load({ url: `${server.url}/api/keys`, headers: { cookie }, name: 'GET /api/keys (list from the db)' }))
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
