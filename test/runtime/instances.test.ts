import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import WebSocket from 'ws'
import { newId } from '../../src/db/ids.js'
import { addMember, createTestDatabase, secondHandle, signUp, signUpWithOrg, type EnvOverrides } from '../helper.js'
import { fakeRuns } from './fakes.js'
import { buildRuntimeApp } from './group.js'

/**
 * Sign-out and removed memberships close sockets on every instance (the
 * SECURITY checklist): the change travels on the identity NOTIFY. On Postgres each app
 * has its own pool and LISTEN connection, as two processes would; on PGlite they share
 * the one embedded database, and the notice goes round within the process.
 */
async function twoInstances(t: import('tap').Test) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-sockets-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const shared = await createTestDatabase(t)
  const runs = fakeRuns()
  const env: EnvOverrides = { ALLOW_DEV_ORG: 'false', SANDBOX_UNCONFINED: 'true', DATA_DIR: dataDir }
  const a = await buildRuntimeApp(t, { db: shared, env, runtime: { runs } })
  const b = await buildRuntimeApp(t, { db: await secondHandle(t, shared), env, runtime: { runs } })
  await b.listen({ port: 0, host: '127.0.0.1' })
  const baseB = `ws://127.0.0.1:${(b.server.address() as { port: number }).port}`
  return { a, b, runs, baseB }
}

function terminal(url: string, cookie: string) {
  const ws = new WebSocket(url, { headers: { cookie } })
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }))
  )
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve())
    ws.once('error', reject)
  })
  return { ws, closed, opened }
}

t.test("sign-out through instance A closes the session's terminal on instance B (1008)", async (t) => {
  const { a, b, runs, baseB } = await twoInstances(t)
  const owner = await signUpWithOrg(a)
  const runId = newId()
  runs.add(owner.org.id, runId)
  const term = terminal(`${baseB}/api/runs/${runId}/terminal`, owner.cookie)
  await term.opened
  t.equal(b.runtime.sockets.size, 1)
  t.equal(a.runtime.sockets.size, 0, 'nothing open on A itself')

  t.equal(
    (await a.inject({ method: 'POST', url: '/api/auth/sign-out', headers: { cookie: owner.cookie } })).statusCode,
    204
  )
  t.same(await term.closed, { code: 1008, reason: 'signed out' })
})

t.test("removing a membership through A closes that member's sockets in that org on B, and only theirs", async (t) => {
  const { a, b, runs, baseB } = await twoInstances(t)
  const owner = await signUpWithOrg(a)
  const member = await signUp(a)
  await addMember(a, owner.cookie, owner.org.id, member.user.email, 'member')
  const runId = newId()
  runs.add(owner.org.id, runId)
  const url = `${baseB}/api/runs/${runId}/terminal`
  const theirs = terminal(url, member.cookie)
  const ours = terminal(url, owner.cookie)
  await Promise.all([theirs.opened, ours.opened])
  t.equal(b.runtime.sockets.size, 2)

  const removed = await a.inject({
    method: 'DELETE',
    url: `/api/auth/organizations/${owner.org.id}/members/${member.user.id}`,
    headers: { cookie: owner.cookie }
  })
  t.equal(removed.statusCode, 204)
  t.same(await theirs.closed, { code: 1008, reason: 'membership removed' })
  // the notice that closed theirs has been handled in full: had it matched ours, ours would be closing too
  t.equal(ours.ws.readyState, WebSocket.OPEN, "the owner's terminal stays open")
  const refused = await b.inject({ url: '/api/tools/policies', headers: { cookie: member.cookie } })
  t.equal(refused.statusCode, 403, 'and the member is out of the org on B at once')
  t.equal(refused.json().error, 'no_organization')
  ours.ws.close()
  await ours.closed
})

t.test('sign-out on the instance that holds the socket closes it too (its own notice is not needed)', async (t) => {
  const { b, runs, baseB } = await twoInstances(t)
  const owner = await signUpWithOrg(b)
  const runId = newId()
  runs.add(owner.org.id, runId)
  const term = terminal(`${baseB}/api/runs/${runId}/terminal`, owner.cookie)
  await term.opened
  t.equal(
    (await b.inject({ method: 'POST', url: '/api/auth/sign-out', headers: { cookie: owner.cookie } })).statusCode,
    204
  )
  t.same(await term.closed, { code: 1008, reason: 'signed out' })
})
