import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { startServer } from '../server-process.js'

// The embedded database (PGlite in its own thread) keeps every write it
// acknowledged when the service is killed mid-load, and the next start finishes the work.
const start = ['scripts/start.mjs']

t.test(
  'kill -9 under load on the embedded database: every acknowledged run is there after a restart, and all of them end',
  { skip: embeddedPassOnly },
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-kill-'))
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
    const first = await startServer({ DATA_DIR: dataDir, ECHO_WORD_DELAY_MS: '5', RUN_WORKER_CONCURRENCY: '4' }, start)
    t.teardown(() => first.kill('SIGKILL'))

    // sixteen clients post runs (echo runs execute meanwhile); the service dies once 400 are acknowledged
    const acknowledged = new Set<string>()
    let killed = false
    const target = 400
    let reached!: () => void
    const enough = new Promise<void>((resolve) => (reached = resolve))
    const client = async (n: number) => {
      for (let i = 0; !killed; i++) {
        let id: string
        try {
          const res = await fetch(`${first.url}/api/runs`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ prompt: `client ${n} run ${i}: one two three four` })
          })
          if (res.status !== 201) continue
          id = ((await res.json()) as { run: { id: string } }).run.id
        } catch {
          return // the connection died with the service: not acknowledged
        }
        acknowledged.add(id)
        if (acknowledged.size >= target) reached()
      }
    }
    const clients = Array.from({ length: 16 }, (_, n) => client(n))
    await enough
    t.ok(first.kill('SIGKILL'))
    killed = true
    await first.exit
    await Promise.all(clients)
    t.ok(acknowledged.size >= target, `${acknowledged.size} runs acknowledged before the kill`)

    // the restart takes over the dead process's lock; the sweeper fails what was running
    // (worker_lost, after the lease) and the workers run what was queued
    const second = await startServer(
      { DATA_DIR: dataDir, RUN_LEASE_MS: '1000', RUN_SWEEP_MS: '100', RUN_POLL_MS: '50', RUN_WORKER_CONCURRENCY: '4' },
      start
    )
    t.teardown(() => second.kill('SIGKILL'))
    const statuses = async () => {
      const ids = [...acknowledged]
      const found = new Map<string, string>()
      for (let i = 0; i < ids.length; i += 25) {
        await Promise.all(
          ids.slice(i, i + 25).map(async (id) => {
            const res = await fetch(`${second.url}/api/runs/${id}`)
            if (res.status === 200) found.set(id, ((await res.json()) as { run: { status: string } }).run.status)
          })
        )
      }
      return found
    }
    const after = await statuses()
    t.equal(after.size, acknowledged.size, 'every acknowledged run is stored')
    // what the restarted workers and sweeper still have to do: polled, as a client would
    const unfinished = async () => {
      let n = 0
      for (const status of ['queued', 'running']) {
        n += ((await (await fetch(`${second.url}/api/runs?status=${status}&limit=100`)).json()) as { items: unknown[] })
          .items.length
      }
      return n
    }
    const deadline = Date.now() + 60_000
    while ((await unfinished()) > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 200))
    const settled = await statuses()
    t.same(
      [...settled.values()].filter((s) => !['succeeded', 'failed'].includes(s)),
      [],
      'every acknowledged run ended'
    )
    const lost = [...settled.values()].filter((s) => s === 'failed').length
    t.ok(lost <= 4, `only runs that were executing at the kill failed (${lost}, four workers)`)
    t.ok(second.kill('SIGTERM'))
    t.equal(await second.exit, 0, 'the restarted service shuts down cleanly')
  }
)
