import { sql } from 'drizzle-orm'
import { PgDialect } from 'drizzle-orm/pg-core'
import t from 'tap'
import { rowsOf, withConstants } from '../../src/db/client.js'
import { claimRuns, claimStatement, claimValues } from '../../src/runs/runs-repo.js'
import { buildTestApp, signUpWithOrg } from '../helper.js'

// The run claim's text is built once, with placeholders, and each claim only fills in its
// values. Claims with other values (the instance, the limit, the lease, the history budget)
// must each send their own, written into the text as constants quoted as ever: the text
// sent is the one drizzle builds afresh for those values, and it reads back as them.

const QUIET = { RUN_WORKER_CONCURRENCY: '0', RUN_SWEEP_MS: '600000', RUN_POLL_MS: '600000' }

t.test('each claim sends its own values in the text built once, hostile strings quoted', async (t) => {
  const app = await buildTestApp(t, { env: QUIET })
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  const started: string[] = []
  for (const [i, user] of [a, b, a, b, a, b].entries()) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: user.cookie },
      payload: { prompt: `run ${i}`, engine: 'echo' }
    })
    t.equal(res.statusCode, 201)
    started.push(res.json().run.id as string)
  }

  const claims = [
    { instanceId: "it's an instance", leaseMs: 60_000, budgetBytes: 100_000, limit: 1 },
    { instanceId: "\\'; drop table runs; --", leaseMs: 30_500, budgetBytes: 5_000, limit: 2 },
    { instanceId: 'back\\slash $1 $2', leaseMs: 90_000, budgetBytes: 100_000, limit: 3 }
  ]
  const dialect = new PgDialect()
  const taken: string[] = []
  for (const o of claims) {
    const sent: Array<{ query: string; parameters: readonly unknown[] }> = []
    const stop = app.testDb.database.onStatement((query, parameters) => {
      if (query.includes('queued_orgs')) sent.push({ query, parameters })
    })
    const { claimed } = await claimRuns(app.db, o)
    stop()
    const fresh = dialect.sqlToQuery(claimStatement(claimValues(o)))
    t.same(
      sent,
      [{ query: withConstants(fresh.sql, fresh.params).query, parameters: [] }],
      `${JSON.stringify(o.instanceId)}: one statement, the text drizzle builds for these values, every value a constant`
    )
    t.equal(claimed.length, o.limit, `${JSON.stringify(o.instanceId)} takes its own limit of runs`)
    for (const { run } of claimed) {
      const [row] = rowsOf<{ owner: string; lease: number }>(
        await app.db.execute(
          sql`select lease_owner as owner, extract(epoch from lease_expires_at - started_at)::float8 as lease
              from runs where id = ${run.id}`
        )
      )
      t.equal(row!.owner, o.instanceId, 'the lease owner reads back as itself')
      t.equal(run.leaseOwner, o.instanceId, 'and is returned as such')
      t.ok(Math.abs(row!.lease - o.leaseMs / 1000) < 5, 'the lease is its own claim’s')
      taken.push(run.id)
    }
  }
  t.same(taken.sort(), started.sort(), 'every run taken once')
  t.same(await claimRuns(app.db, claims[0]!), { claimed: [], waiting: false }, 'none left')
})
