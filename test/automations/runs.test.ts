// Automations that start runs which then run: the run worker, a playbook's steps, an instance
// killed mid-fire whose run another instance takes. These need the whole app (the runs group's
// worker and what it calls); automations.test.ts tests the group alone.
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import type { Clock } from '../../src/worker-loop.js'
import { buildTestApp, createTestDatabase, secondHandle, signUpWithOrg, waitFor, type Teardown } from '../helper.js'
import { create, FakeClock, firesOf, QUIET } from './group.js'

async function scheduled(t: Teardown, clock: Clock, env: Record<string, string>) {
  const app = await buildTestApp(t, { clock, env: { ...QUIET, ...env } })
  const owner = await signUpWithOrg(app)
  return { app, owner, headers: { cookie: owner.cookie } }
}

t.test('fires and triggers start runs: prompt, skill and playbook targets, origin automation', async (t) => {
  const clock = new FakeClock('2026-06-01T08:59:59Z')
  const { app, headers } = await scheduled(t, clock, { RUN_WORKER_CONCURRENCY: '4', RUN_POLL_MS: '50' })
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'report', description: 'Report', instructions: 'Write the report.' }
    })
  ).json().skill
  const second = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'review', description: 'Review', instructions: 'Review it.' }
    })
  ).json().skill
  const playbook = (
    await app.inject({
      method: 'POST',
      url: '/api/playbooks',
      headers,
      payload: { name: 'Both', steps: [{ skillId: skill.id }, { skillId: second.id }] }
    })
  ).json().playbook
  const byPrompt = await create(app, headers, { cron: '0 9 * * *', target: { prompt: 'good morning' } })
  const bySkill = await create(app, headers, { cron: '0 9 * * *', target: { skillId: skill.id, input: 'for June' } })
  const byPlaybook = await create(app, headers, { cron: '0 9 * * *', target: { playbookId: playbook.id } })
  clock.set('2026-06-01T09:00:00.250Z')
  t.equal(await app.automations.scheduler.fireDue(), 3)

  const runs = rowsOf<{
    id: string
    prompt: string
    instructions: string | null
    origin: string
    metadata: unknown
    status: string
    root_run_id: string
  }>(
    await app.db.execute(
      sql`select id, prompt, instructions, origin, metadata, status, root_run_id from runs order by id`
    )
  )
  const meta = (r: { metadata: unknown }) =>
    (typeof r.metadata === 'string' ? JSON.parse(r.metadata) : r.metadata) as Record<string, unknown>
  const of = (id: string) => runs.find((r) => meta(r).automationId === id)!
  t.match(of(byPrompt.id), { prompt: 'good morning', origin: 'automation' })
  t.same(meta(of(byPrompt.id)), { automationId: byPrompt.id, scheduledFor: '2026-06-01T09:00:00.000Z' })
  t.match(of(bySkill.id), { prompt: 'for June', instructions: 'Write the report.', origin: 'automation' })
  t.match(meta(of(bySkill.id)), { skillId: skill.id, skillVersion: 1, automationId: bySkill.id })
  const root = of(byPlaybook.id)
  t.match(meta(root), { playbookId: playbook.id, playbookStep: 0, automationId: byPlaybook.id })
  await waitFor('the playbook ran both steps', async () => {
    const rows = rowsOf<{ status: string }>(
      await app.db.execute(sql`select status from runs where root_run_id = ${root.id}`)
    )
    return rows.length === 2 && rows.every((r) => r.status === 'succeeded')
  }).catch(async (err: unknown) => {
    // what the runs and their events were at the timeout, to read why (seen once in CI, not since)
    const runs = await app.db.execute(
      sql`select id, status, root_run_id, lease_owner, lease_expires_at, error from runs order by id`
    )
    const events = await app.db.execute(sql`select run_id, type from run_events order by id`)
    t.comment(JSON.stringify({ runs: rowsOf(runs), events: rowsOf(events) }, null, 1))
    throw err
  })
  t.match((await app.inject({ method: 'GET', url: `/api/automations/${byPrompt.id}`, headers })).json().automation, {
    lastFiredAt: '2026-06-01T09:00:00.250Z',
    lastRunId: of(byPrompt.id).id
  })
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/skills/${skill.id}`, headers })).statusCode,
    409,
    'a skill an automation runs stays'
  )
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/playbooks/${playbook.id}`, headers })).statusCode,
    409,
    'so does a playbook'
  )

  const trig = { ...headers, 'idempotency-key': 'trigger-1' }
  const triggered = await app.inject({ method: 'POST', url: `/api/automations/${bySkill.id}/trigger`, headers: trig })
  t.equal(triggered.statusCode, 201)
  t.match(triggered.json().run, {
    origin: 'automation',
    metadata: { automationId: bySkill.id, scheduledFor: null, skillId: skill.id }
  })
  const again = await app.inject({ method: 'POST', url: `/api/automations/${bySkill.id}/trigger`, headers: trig })
  t.equal(again.json().run.id, triggered.json().run.id, 'a retried trigger is the same run')
  t.same(await firesOf(app, headers, bySkill.id), ['2026-06-01T09:00:00.000Z'], 'a trigger is not a fire')
  await app.inject({ method: 'PATCH', url: `/api/automations/${byPrompt.id}`, headers, payload: { enabled: false } })
  t.equal(
    (await app.inject({ method: 'POST', url: `/api/automations/${byPrompt.id}/trigger`, headers })).statusCode,
    201,
    'a disabled automation can still be triggered'
  )
})

t.test('an instance killed mid-fire: the tick still starts exactly one run', async (t) => {
  const db = await createTestDatabase(t)
  const clock = new FakeClock('2026-08-01T06:59:00Z')
  const env = { SCHEDULER: 'false', RUN_POLL_MS: '50', RUN_SWEEP_MS: '100' }
  const a = await buildTestApp(t, { db, clock, env: { ...env, RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(a)
  const headers = { cookie: owner.cookie }
  const job = await create(a, headers, { cron: '0 7 * * *' })
  clock.set('2026-08-01T07:00:00.100Z')

  // A dies inside the fire transaction, before it commits: nothing of it stays
  a.automations.scheduler.beforeCommit = async () => {
    throw new Error('killed')
  }
  await t.rejects(a.automations.scheduler.fireDue(), /killed/)
  t.equal(rowsOf(await a.db.execute(sql`select 1 from automation_fires`)).length, 0, 'no fire row')
  t.equal(rowsOf(await a.db.execute(sql`select 1 from runs`)).length, 0, 'no run')

  // A again, this time dying right after its commit, before announcing the run
  a.automations.scheduler.beforeCommit = async () => a.automations.scheduler.kill()
  t.equal(await a.automations.scheduler.fireDue(), 0, 'killed: it announces nothing')
  const b = await buildTestApp(t, {
    db: await secondHandle(t, db),
    clock,
    env: { ...env, RUN_WORKER_CONCURRENCY: '2' }
  })
  t.equal(await b.automations.scheduler.fireDue(), 0, 'B finds the tick fired')
  const run = await waitFor("B's sweeper announced the run and B ran it", async () => {
    const rows = rowsOf<{ id: string; status: string }>(await b.db.execute(sql`select id, status from runs`))
    return rows.length === 1 && rows[0]!.status === 'succeeded' ? rows[0] : null
  })
  t.same(await firesOf(b, headers, job.id), ['2026-08-01T07:00:00.000Z'])
  const started = rowsOf(
    await b.db.execute(sql`select 1 from run_events where run_id = ${run.id} and type = 'run.started'`)
  )
  t.equal(started.length, 1, 'started once')
})
