// The capture worker in real processes. kill -9 while it holds a capture's lease: once the
// lease has passed, the capture goes back to pending (with the postgres pool nothing of a
// delivery that did not commit was kept) and another instance delivers it, once. SIGTERM
// while a delivery hangs: the drain is cut at its deadline and the process exits 0 within
// SHUTDOWN_GRACE_MS, the capture left to its lease.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { createTestDatabase, waitFor } from '../helper.js'
import { messages, startServer, TS_LOADER, type Started } from '../server-process.js'

interface Capture {
  runId: string
  state: string
  attempts: number
  lastError: string | null
}

/**
 * A real server on a database of its own whose capture delivery never finishes
 * (hold-capture-server.ts), with a run that remembers `prompt`: answers once it holds the capture.
 */
async function holdingACapture(t: Test, prompt: string, extraEnv: Record<string, string>) {
  const { url } = await createTestDatabase(t)
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-capture-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env = {
    DATA_DIR: dataDir,
    ...(url ? { DATABASE_URL: url } : {}),
    SANDBOX_PROVIDER: 'none',
    MEMORY_BACKEND: 'postgres',
    MEMORY_CAPTURE_POLL_MS: '50',
    RUN_POLL_MS: '50',
    ...extraEnv
  }
  const held = await startServer(env, [...TS_LOADER, 'test/memory/hold-capture-server.ts'])
  t.teardown(() => held.kill('SIGKILL'))
  const res = await fetch(`${held.url}/api/runs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt })
  })
  t.equal(res.status, 201)
  const runId = ((await res.json()) as { run: { id: string } }).run.id
  await waitFor('a delivery in flight that never ends', async () => held.output().includes('holding capture '), 60_000)
  return { env, held, runId }
}

t.test(
  'a worker killed (SIGKILL) holding a capture: after the lease it is pending again and another instance delivers it exactly once',
  async (t) => {
    // A: claims the capture and holds it (its delivery never finishes) until it is killed
    const facts = ['Remember the kill test fact one.', 'Remember the kill test fact two.']
    const { env, held, runId } = await holdingACapture(t, facts.join(' '), { MEMORY_CAPTURE_LEASE_MS: '1000' })
    const apiA = held.url
    const captures = async (base: string) =>
      ((await (await fetch(`${base}/api/memory/captures`)).json()) as { captures: Capture[] }).captures
    t.match(
      (await captures(apiA)).find((c) => c.runId === runId),
      { state: 'delivering', attempts: 1 },
      'claimed under a lease'
    )

    t.ok(held.kill('SIGKILL'))
    t.equal(await held.exit, null, 'killed, not exited')

    // B: another instance on the same database (the next start, on the embedded one)
    const b: Started = await startServer(env)
    t.teardown(() => b.kill('SIGKILL'))
    const delivered = await waitFor(
      'B delivers the capture',
      async () => {
        const capture = (await captures(b.url)).find((c) => c.runId === runId)
        return capture?.state === 'delivered' ? capture : undefined
      },
      60_000
    )
    t.match(
      delivered,
      { state: 'delivered', attempts: 2, lastError: null },
      'the killed attempt counted, the second delivered'
    )
    const browse = (await (await fetch(`${b.url}/api/memory/browse?limit=100`)).json()) as {
      items: Array<{ content: string }>
    }
    t.equal(browse.items.length, facts.length, 'each fact once')
    t.same(
      browse.items.map((i) => i.content.replace(/\.$/, '')).sort(),
      facts.map((f) => f.replace(/\.$/, '')),
      "the run's facts"
    )
    t.ok(b.kill('SIGTERM'))
    t.equal(await b.exit, 0)
  }
)

t.test(
  'SIGTERM while a delivery hangs: the drain is cut at its deadline and the process exits 0 within the grace',
  async (t) => {
    const { held: a } = await holdingACapture(t, 'Remember the drain fact.', { SHUTDOWN_GRACE_MS: '3000' })
    t.ok(a.kill('SIGTERM'))
    // close-with-grace exits 1 ("killed by timeout") when the close outlives SHUTDOWN_GRACE_MS
    t.equal(await a.exit, 0, 'exits 0')
    t.notMatch(a.output(), /killed by timeout/)
    const said = messages(a.output())
    t.ok(
      said.includes(
        'memory capture worker: the drain did not finish before its deadline; what is in flight is left to its lease'
      ),
      'the cut drain is logged'
    )
    t.ok(said.includes('shut down'), 'the rest of the close ran')
  }
)
