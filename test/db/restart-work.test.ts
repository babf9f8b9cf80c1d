import t from 'tap'
import { multipart } from '../artifacts/helpers.js'
import { waitFor, type TestDatabase } from '../helper.js'
import { clusterSkip, startCluster, startServerOn } from './cluster.js'
import { holdWrites } from './outage.js'

/**
 * Postgres restarted (a fast shutdown: every connection terminated, 57P01) while the real
 * server process (src/server.ts) has runs executing, memory captures due and knowledge
 * documents being extracted: no run fails, no capture or document is failed or orphaned;
 * each finishes once the database is back. A cluster of the test's own, on the Postgres half
 * of the suite (or RESTART_TEST=1).
 */
const skip =
  clusterSkip ||
  (!process.env.DATABASE_URL && !process.env.RESTART_TEST
    ? 'runs in the Postgres half of the suite (DATABASE_URL set) or with RESTART_TEST=1'
    : false)

const RUNS = 6
const DOCUMENTS = 6

t.test(
  'Postgres restarted with runs executing, captures and documents in flight: none failed or orphaned',
  { skip, timeout: 240_000 },
  async (t) => {
    const cluster = await startCluster(t)
    const server = await startServerOn(t, cluster, {
      ECHO_WORD_DELAY_MS: '40',
      RUN_POLL_MS: '100',
      MEMORY_CAPTURE_POLL_MS: '100',
      MEMORY_CAPTURE_BACKOFF_MS: '100',
      MEMORY_CAPTURE_BACKOFF_MAX_MS: '1000',
      KNOWLEDGE_POLL_MS: '100',
      KNOWLEDGE_BACKOFF_MS: '100',
      KNOWLEDGE_BACKOFF_MAX_MS: '1000'
    })
    const api = async (path: string, init?: RequestInit) => {
      const res = await fetch(`${server.url}${path}`, init)
      return { status: res.status, body: (await res.json()) as Record<string, any> }
    }

    // the captures' writes wait on a lock of the test's until the database goes: the captures are being delivered then
    const hold = await holdWrites(t, { url: cluster.url } as TestDatabase, 'memory_items')
    // runs that each remember one fact (a capture when they end), long enough to be running at the restart; half end
    // before it, so their captures are being delivered when the database goes
    const runIds: string[] = []
    for (let i = 0; i < RUNS; i++) {
      const words = Array.from({ length: i % 2 === 0 ? 150 : 5 }, (_, w) => `r${i}w${w}`).join(' ')
      const { status, body } = await api('/api/runs', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: `Remember the restart fact number ${i}. ${words}` })
      })
      t.equal(status, 201)
      runIds.push(body.run.id as string)
    }
    const statusOf = async (id: string) => (await api(`/api/runs/${id}`)).body.run.status as string
    await waitFor('the short runs ended, the long ones running', async () => {
      const statuses = await Promise.all(runIds.map(statusOf))
      return statuses.every((s, i) => s === (i % 2 === 0 ? 'running' : 'succeeded'))
    })

    await hold.blocked()
    // what is in flight as the database goes: the runs above, the captures of the short ones, and documents sent now
    const documentIds: string[] = []
    for (let i = 0; i < DOCUMENTS; i++) {
      const file = multipart({
        filename: `restart-${i}.md`,
        type: 'text/markdown',
        bytes: `# Restart ${i}\n\n${'the queue restarts cleanly. '.repeat(400)}`
      })
      const { status, body } = await api('/api/knowledge/documents', {
        method: 'POST',
        headers: file.headers,
        body: file.payload
      })
      t.equal(status, 202)
      documentIds.push(body.document.id as string)
    }
    const before = (await api('/api/memory/captures')).body.captures as Array<Record<string, unknown>>
    const documentsBefore = await Promise.all(
      documentIds.map(async (id) => (await api(`/api/knowledge/documents/${id}`)).body.document.state as string)
    )
    t.comment(
      `at the stop: captures ${before
        .filter((c) => runIds.includes(c.runId as string))
        .map((c) => c.state)
        .join(', ')}; documents ${documentsBefore.join(', ')}`
    )
    await cluster.stop('fast')
    await cluster.start()

    const runs = await waitFor(
      'every run ended',
      async () => {
        const rows = await Promise.all(runIds.map(async (id) => (await api(`/api/runs/${id}`)).body.run))
        return rows.every((r) => r && ['succeeded', 'failed', 'cancelled'].includes(r.status)) ? rows : null
      },
      120_000
    )
    t.same(
      runs.map((r) => [r.status, r.error ?? null]),
      runIds.map(() => ['succeeded', null]),
      'no run failed'
    )
    const captures = await waitFor(
      'every capture settled',
      async () => {
        const { status, body } = await api('/api/memory/captures')
        if (status !== 200) return null
        const mine = (body.captures as Array<Record<string, unknown>>).filter((c) => runIds.includes(c.runId as string))
        const settled = mine.every((c) => c.state !== 'pending' && c.state !== 'delivering')
        // an orphan stays one: seen, it is the answer
        return (mine.length === RUNS && settled) || mine.some((c) => c.orphan) ? mine : null
      },
      120_000
    )
    t.same(
      captures.map((c) => [c.state, c.orphan ?? false]),
      runIds.map(() => ['delivered', false]),
      'every capture delivered, none dead or orphaned'
    )
    const documents = await waitFor(
      'every document settled',
      async () => {
        const rows = await Promise.all(
          documentIds.map(async (id) => (await api(`/api/knowledge/documents/${id}`)).body.document)
        )
        return rows.every((d) => d && ['ready', 'failed'].includes(d.state)) ? rows : null
      },
      120_000
    )
    t.same(
      documents.map((d) => d.state),
      documentIds.map(() => 'ready'),
      'every document extracted, none failed'
    )
    const exited = await Promise.race([
      server.exit.then(() => true),
      new Promise<boolean>((resolve) => setImmediate(() => resolve(false)))
    ])
    t.notOk(exited, 'the process never exited')
  }
)
