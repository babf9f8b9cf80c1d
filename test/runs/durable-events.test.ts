import postgres from 'postgres'
import t from 'tap'
import { clusterSkip, startCluster, startServerOn } from '../db/cluster.js'
import { SseClient } from './sse-client.js'

/**
 * An event is shown to clients only once it is durable: every event a client read from a
 * run's event stream is still stored after Postgres crashes right after. The cluster's
 * WAL writer waits 10 s between flushes, so an event committed without a flush of its own
 * (`synchronous_commit = off`) would be lost by the crash. The real server process
 * (src/server.ts) on a cluster of the test's own: on the Postgres half of the suite (or
 * RESTART_TEST=1).
 */
const skip =
  clusterSkip ||
  (!process.env.DATABASE_URL && !process.env.RESTART_TEST
    ? 'runs in the Postgres half of the suite (DATABASE_URL set) or with RESTART_TEST=1'
    : false)

/** A run's event stream read until its run.succeeded: each event as "id run type". */
async function shownUntilSucceeded(base: string, runId: string): Promise<string[]> {
  const stream = await SseClient.open(`${base}/api/runs/${runId}/events`)
  try {
    if (stream.status !== 200) throw new Error(`events of ${runId}: status ${stream.status}`)
    await stream.until((c) => c.events('run.succeeded').length > 0, 60_000)
    const shown = stream.frames.filter((f) => f.id !== undefined)
    return shown
      .slice(0, shown.findIndex((f) => f.event === 'run.succeeded') + 1)
      .map((f) => `${f.id} ${runId} ${f.event}`)
  } finally {
    stream.close()
  }
}

t.test('events a client was shown survive a Postgres crash right after them', { skip }, async (t) => {
  const cluster = await startCluster(t, ['wal_writer_delay=10000'])
  // no lease renewal or sweep writes (which would flush the WAL) while the runs execute
  const server = await startServerOn(t, cluster, { RUN_LEASE_MS: '60000', RUN_SWEEP_MS: '60000' })

  const ids: string[] = []
  for (let i = 0; i < 3; i++) {
    const res = await fetch(`${server.url}/api/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: `run ${i} says a few words` })
    })
    t.equal(res.status, 201, `run ${i} accepted`)
    ids.push(((await res.json()) as { run: { id: string } }).run.id)
  }
  const seen = (await Promise.all(ids.map((id) => shownUntilSucceeded(server.url, id)))).flat()

  await cluster.stop('immediate')
  await cluster.start()
  const sql = postgres(cluster.url, { max: 1, onnotice: () => {} })
  t.teardown(() => sql.end())
  const stored = new Set(
    (await sql<Array<{ line: string }>>`select id || ' ' || run_id || ' ' || type as line from run_events`).map(
      (r) => r.line
    )
  )
  t.ok(seen.length >= 9, `${seen.length} events shown`)
  t.same(
    seen.filter((line) => !stored.has(line)),
    [],
    `all ${seen.length} events shown are stored`
  )
  const statuses = await sql<Array<{ status: string }>>`select status from runs where id in ${sql(ids)}`
  t.same(
    statuses.map((r) => r.status),
    ['succeeded', 'succeeded', 'succeeded']
  )
})
