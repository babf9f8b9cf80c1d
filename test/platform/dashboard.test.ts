import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import { uuidv7Floor } from '../../src/platform/dashboard.js'
import { buildTestApp, signUpWithOrg, waitFor } from '../helper.js'

t.test('uuidv7Floor sorts before every id made at or after the moment, after every earlier one', async (t) => {
  const at = new Date('2026-11-22T10:00:00.000Z')
  const floor = uuidv7Floor(at)
  t.match(floor, /^[0-9a-f]{8}-[0-9a-f]{4}-7000-8000-000000000000$/)
  t.ok(newId() > floor, 'a newer id')
  t.ok(uuidv7Floor(new Date(at.getTime() - 1)) < floor, 'an earlier moment')
})

t.test(
  "the dashboard counts the org's runs, memory, knowledge and automations, and lists the newest changes",
  async (t) => {
    const app = await buildTestApp(t)
    const owner = await signUpWithOrg(app)
    const other = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    const empty = await app.inject({ method: 'GET', url: '/api/dashboard', headers })
    t.equal(empty.statusCode, 200, empty.body)
    t.same(
      empty.json(),
      {
        runs: {
          total: 0,
          byStatus: { queued: 0, running: 0, requires_action: 0, succeeded: 0, failed: 0, cancelled: 0 },
          last24h: 0
        },
        activeRuns: 0,
        memory: { items: 0, pendingCaptures: 0, deadCaptures: 0, orphans: 0 },
        knowledge: { records: 0, documents: 0 },
        automations: { enabled: 0, nextFireAt: null },
        recent: []
      },
      'a new org'
    )

    const run = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers,
      payload: { prompt: 'Remember that the deploy window is Tuesday.' }
    })
    t.equal(run.statusCode, 201, run.body)
    const runId = run.json().run.id
    await waitFor(
      'the run finished',
      async () =>
        (await app.inject({ method: 'GET', url: `/api/runs/${runId}`, headers })).json().run.status === 'succeeded'
    )
    const record = await app.inject({
      method: 'POST',
      url: '/api/knowledge',
      headers,
      payload: { title: 'Deploy checklist', body: 'Steps.' }
    })
    t.equal(record.statusCode, 201, record.body)
    const automation = await app.inject({
      method: 'POST',
      url: '/api/automations',
      headers,
      payload: { name: 'nightly', cron: '0 3 * * *', target: { prompt: 'hello' } }
    })
    t.equal(automation.statusCode, 201, automation.body)
    // a queued run nobody will claim, and one cancelled; another org's run counts nowhere
    const queuedId = newId()
    await app.db.execute(
      sql`insert into runs (id, org_id, root_run_id, engine, prompt, status, origin) values (${queuedId}, ${owner.org.id}, ${queuedId}, 'nosuch', 'waiting', 'queued', 'api')`
    )
    const cancelledId = newId()
    await app.db.execute(
      sql`insert into runs (id, org_id, root_run_id, engine, prompt, status, origin, finished_at) values (${cancelledId}, ${owner.org.id}, ${cancelledId}, 'echo', 'gone', 'cancelled', 'api', now())`
    )
    await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: other.cookie },
      payload: { prompt: 'not yours' }
    })

    const res = await app.inject({ method: 'GET', url: '/api/dashboard', headers })
    t.equal(res.statusCode, 200, res.body)
    const body = res.json()
    t.same(body.runs, {
      total: 3,
      byStatus: { queued: 1, running: 0, requires_action: 0, succeeded: 1, failed: 0, cancelled: 1 },
      last24h: 3
    })
    t.equal(body.activeRuns, 1)
    t.equal(body.knowledge.records, 1)
    t.equal(body.automations.enabled, 1)
    t.equal(body.automations.nextFireAt, automation.json().automation.nextRuns[0], 'the automation is next to fire')
    t.ok(body.memory.items + body.memory.pendingCaptures >= 0, 'memory counts are numbers')
    t.same(
      body.recent.map((r: { kind: string; id: string }) => [r.kind, r.id]).sort(),
      [
        ['record', record.json().record.id],
        ['run', cancelledId],
        ['run', queuedId],
        ['run', runId]
      ].sort(),
      'the newest changes of this org only'
    )
    for (let i = 1; i < body.recent.length; i++) t.ok(body.recent[i - 1].at >= body.recent[i].at, 'newest first')
    t.equal(body.recent.find((r: { kind: string }) => r.kind === 'record').title, 'Deploy checklist')
  }
)

// the usage of runs executed through the API (the usage tests on inserted rows: test/platform/usage.test.ts)
t.test(
  'runs executed through the API are in the usage of their day, with the tokens the engine reported',
  async (t) => {
    const app = await buildTestApp(t)
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    for (const prompt of ['one two three', 'four five']) {
      const res = await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt } })
      t.equal(res.statusCode, 201, res.body)
    }
    await waitFor('both runs finished', async () => {
      const res = await app.inject({ method: 'GET', url: '/api/runs?status=succeeded', headers })
      return res.json().items.length === 2
    })
    const res = await app.inject({ method: 'GET', url: '/api/usage?groupBy=engine', headers })
    t.equal(res.statusCode, 200, res.body)
    const body = res.json()
    t.equal(body.buckets.length, 30, 'the last 30 days by default, one engine')
    const today = body.buckets.at(-1)
    t.equal(today.date, new Date().toISOString().slice(0, 10), 'ends today (UTC)')
    t.match(today, { engine: 'echo', model: null, userId: null, runs: 2, succeeded: 2, failed: 0 })
    t.same([today.inputTokens, today.outputTokens], [0, 0], 'echo calls no model: no tokens')
    t.same(body.totals, {
      runs: 2,
      succeeded: 2,
      failed: 0,
      inputTokens: today.inputTokens,
      outputTokens: today.outputTokens,
      durationMs: today.durationMs
    })
    const stored = rowsOf<{ input: number; output: number }>(
      await app.db.execute(
        sql`select sum(input_tokens)::int as input, sum(output_tokens)::int as output from runs where org_id = ${owner.org.id}`
      )
    )[0]!
    t.same(
      [today.inputTokens, today.outputTokens],
      [stored.input ?? 0, stored.output ?? 0],
      "the runs' own token counts"
    )
  }
)
