import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { UNANNOUNCED_AFTER_MS } from '../../src/runs/sweeper.js'
import { mintKey, signUpWithOrg, waitFor } from '../helper.js'
import { buildSkillsApp } from './group.js'

type App = Awaited<ReturnType<typeof buildSkillsApp>>

async function skillsOf(app: App, cookie: string, n: number): Promise<string[]> {
  const ids: string[] = []
  for (let i = 1; i <= n; i++) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers: { cookie },
      payload: { name: `step-${i}`, description: `Step ${i}`, instructions: `Do step ${i}.` }
    })
    ids.push(res.json().skill.id)
  }
  return ids
}

interface ThreadRun {
  id: string
  parentRunId: string | null
  status: string
  prompt: string
  origin: string
  metadata: Record<string, unknown>
  instructions: string | null
  output: string | null
  settings: { tools: string[] | null }
}
const threadRuns = async (app: App, headers: Record<string, string>, rootRunId: string): Promise<ThreadRun[]> =>
  (await app.inject({ method: 'GET', url: `/api/threads/${rootRunId}`, headers })).json().runs

t.test("playbooks: CRUD, steps checked against the org's skills, a skill in use cannot be deleted", async (t) => {
  const app = await buildSkillsApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const [a, b] = await skillsOf(app, owner.cookie, 2)
  const created = await app.inject({
    method: 'POST',
    url: '/api/playbooks',
    headers,
    payload: { name: 'Ship it', steps: [{ skillId: a, input: 'first' }, { skillId: b }] }
  })
  t.equal(created.statusCode, 201)
  const p = created.json().playbook
  t.same(Object.keys(p).sort(), ['createdAt', 'createdBy', 'description', 'id', 'name', 'steps', 'updatedAt'])
  t.same(p.steps, [
    { skillId: a, input: 'first' },
    { skillId: b, input: '' }
  ])

  const other = await signUpWithOrg(app)
  const [foreign] = await skillsOf(app, other.cookie, 1)
  const stolen = await app.inject({
    method: 'POST',
    url: '/api/playbooks',
    headers,
    payload: { name: 'x', steps: [{ skillId: a }, { skillId: foreign }] }
  })
  t.equal(stolen.statusCode, 404, "another org's skill is not found")
  t.match(stolen.json().message, /steps\/1\/skillId/)
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/playbooks', headers, payload: { name: 'x', steps: [] } }))
      .statusCode,
    400
  )

  const patched = await app.inject({
    method: 'PATCH',
    url: `/api/playbooks/${p.id}`,
    headers,
    payload: { description: 'weekly', steps: [{ skillId: b }] }
  })
  t.equal(patched.statusCode, 200)
  t.match(patched.json().playbook, { name: 'Ship it', description: 'weekly', steps: [{ skillId: b, input: '' }] })

  const inUse = await app.inject({ method: 'DELETE', url: `/api/skills/${b}`, headers })
  t.equal(inUse.statusCode, 409)
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/skills/${a}`, headers })).statusCode,
    204,
    'no longer a step'
  )

  const { authorization } = await mintKey(app, owner.cookie)
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/playbooks', headers: { authorization } })).json().items.length,
    1
  )
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/playbooks/${p.id}`, headers: { authorization } })).statusCode,
    200
  )
  t.equal(
    (
      await app.inject({
        method: 'PATCH',
        url: `/api/playbooks/${p.id}`,
        headers: { authorization },
        payload: { name: 'k' }
      })
    ).statusCode,
    401
  )
  t.equal((await app.inject({ method: 'DELETE', url: `/api/playbooks/${p.id}`, headers })).statusCode, 204)
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/skills/${b}`, headers })).statusCode,
    204,
    'the playbook went, so may the skill'
  )
})

t.test(
  'a playbook run: one thread, each step when the previous succeeded, parented, exactly once; edits meanwhile change nothing',
  async (t) => {
    const app = await buildSkillsApp(t)
    const owner = await signUpWithOrg(app)
    const { authorization } = await mintKey(app, owner.cookie)
    const headers = { authorization }
    const steps = await skillsOf(app, owner.cookie, 3)
    const p = (
      await app.inject({
        method: 'POST',
        url: '/api/playbooks',
        headers: { cookie: owner.cookie },
        payload: { name: 'Three', steps: steps.map((skillId, i) => ({ skillId, input: i === 1 ? 'carefully' : '' })) }
      })
    ).json().playbook
    const started = await app.inject({
      method: 'POST',
      url: `/api/playbooks/${p.id}/run`,
      headers: { ...headers, 'idempotency-key': 'pb-1' },
      payload: { input: 'for release 7' }
    })
    t.equal(started.statusCode, 201)
    const first = started.json().run
    t.match(first, {
      rootRunId: first.id,
      parentRunId: null,
      origin: 'skill',
      prompt: 'for release 7',
      instructions: 'Do step 1.',
      metadata: { playbookId: p.id, playbookStep: 0, skillId: steps[0], skillVersion: 1 }
    })
    const replay = await app.inject({
      method: 'POST',
      url: `/api/playbooks/${p.id}/run`,
      headers: { ...headers, 'idempotency-key': 'pb-1' },
      payload: { input: 'for release 7' }
    })
    t.equal(replay.json().run.id, first.id, 'the key replays the same start')
    // changed after the start: the running playbook keeps what it started with
    await app.inject({
      method: 'PATCH',
      url: `/api/skills/${steps[2]}`,
      headers: { cookie: owner.cookie },
      payload: { instructions: 'Changed.', version: 1 }
    })

    const runs = await waitFor('three steps succeeded', async () => {
      const all = await threadRuns(app, headers, first.id)
      return all.length === 3 && all.every((r) => r.status === 'succeeded') ? all : null
    })
    t.same(
      runs.map((r) => r.prompt),
      ['for release 7', 'carefully\n\nfor release 7', 'for release 7']
    )
    t.same(
      runs.map((r) => r.instructions),
      ['Do step 1.', 'Do step 2.', 'Do step 3.'],
      "each step's skill as its system message, as it was at the start"
    )
    t.same(
      runs.map((r) => r.parentRunId),
      [null, runs[0]!.id, runs[1]!.id]
    )
    t.same(
      runs.map((r) => r.metadata.playbookStep),
      [0, 1, 2]
    )
    t.same(
      runs.map((r) => r.origin),
      ['skill', 'skill', 'skill']
    )
    t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from runs`)), [{ n: 3 }], 'nothing more')

    // a run that only carries a playbook's metadata moves nothing
    const spoof = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers,
      payload: { prompt: 'spoof', rootRunId: first.id, metadata: { playbookId: p.id, playbookStep: 0 } }
    })
    await waitFor(
      'the spoof ends',
      async () =>
        (await app.inject({ method: 'GET', url: `/api/runs/${spoof.json().run.id}`, headers })).json().run.status ===
        'succeeded'
    )
    t.equal((await threadRuns(app, headers, first.id)).length, 4)
  }
)

t.test("each step sees the earlier steps' answers, and gets only its skill's allowed tools", async (t) => {
  const app = await buildSkillsApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const skill = async (name: string, extra: Record<string, unknown> = {}) =>
    (
      await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers,
        payload: { name, description: name, instructions: `Be ${name}.`, ...extra }
      })
    ).json().skill.id as string
  const a = await skill('first')
  const b = await skill('second', { allowedTools: ['Read', 'LS', 'WebSearch'] })
  const created = await app.inject({ method: 'GET', url: `/api/skills/${b}`, headers })
  t.same(created.json().skill.warnings, [
    'allowed-tools names "WebSearch", which Cairn does not have: runs of this skill do not get it'
  ])
  const p = (
    await app.inject({
      method: 'POST',
      url: '/api/playbooks',
      headers,
      payload: {
        name: 'Chain',
        steps: [
          { skillId: a, input: 'The release is 7.2' },
          { skillId: b, input: 'history' }
        ]
      }
    })
  ).json().playbook
  const first = (await app.inject({ method: 'POST', url: `/api/playbooks/${p.id}/run`, headers })).json().run
  const runs = await waitFor('both steps succeeded', async () => {
    const all = await threadRuns(app, headers, first.id)
    return all.length === 2 && all.every((r) => r.status === 'succeeded') ? all : null
  })
  t.equal(runs[1]!.output, 'history: 1 turns: The release is 7.2', "step 2 was given step 1's turn")
  t.same(
    runs.map((r) => r.settings.tools),
    [null, ['read_file', 'list_files']]
  )
})

t.test('a cancelled step stops the playbook', async (t) => {
  const app = await buildSkillsApp(t, { env: { ECHO_WORD_DELAY_MS: '200' } })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const steps = await skillsOf(app, owner.cookie, 2)
  const p = (
    await app.inject({
      method: 'POST',
      url: '/api/playbooks',
      headers,
      payload: {
        name: 'Two',
        steps: steps.map((skillId) => ({ skillId, input: 'a long enough input to cancel in time' }))
      }
    })
  ).json().playbook
  const first = (await app.inject({ method: 'POST', url: `/api/playbooks/${p.id}/run`, headers })).json().run
  await waitFor(
    'step 1 runs',
    async () =>
      (await app.inject({ method: 'GET', url: `/api/runs/${first.id}`, headers })).json().run.status === 'running'
  )
  t.equal((await app.inject({ method: 'POST', url: `/api/runs/${first.id}/cancel`, headers })).statusCode, 200)
  await waitFor(
    'step 1 cancelled',
    async () =>
      (await app.inject({ method: 'GET', url: `/api/runs/${first.id}`, headers })).json().run.status === 'cancelled'
  )
  await app.runs.worker.close(5000)
  t.same(
    (await threadRuns(app, headers, first.id)).map((r) => r.status),
    ['cancelled'],
    'no second step'
  )
})

t.test('an instance killed between two steps: the next step still runs once, on another instance', async (t) => {
  const first = await buildSkillsApp(t, { env: { RUN_SWEEP_MS: '200', RUN_LEASE_MS: '2000' } })
  const owner = await signUpWithOrg(first)
  const headers = { cookie: owner.cookie }
  const steps = await skillsOf(first, owner.cookie, 3)
  const p = (
    await first.inject({
      method: 'POST',
      url: '/api/playbooks',
      headers,
      payload: { name: 'Crash', steps: steps.map((skillId) => ({ skillId })) }
    })
  ).json().playbook

  // the instance dies right as step 1's finish commits with step 2 in it, before it can announce step 2
  const { forFollowUps: followUps } = first.skills
  const afterFinish = followUps.afterFinish
  let killedAfter: string | null = null
  followUps.afterFinish = async (tx, run) => {
    const next = await afterFinish(tx, run)
    if (next.length > 0 && killedAfter === null) {
      killedAfter = run.id
      first.runs.kill()
    }
    return next
  }
  const root = (await first.inject({ method: 'POST', url: `/api/playbooks/${p.id}/run`, headers })).json().run
  await waitFor('step 1 finished and the instance died', async () => killedAfter)
  // the kill happened inside the finishing transaction: wait for its commit
  const between = await waitFor("step 1's end committed", async () => {
    const rows = rowsOf<{ status: string }>(
      await first.db.execute(sql`select status from runs where root_run_id = ${root.id} order by id`)
    )
    return rows.length === 2 ? rows : null
  })
  t.same(
    between.map((r) => r.status),
    ['succeeded', 'queued'],
    "step 2 committed with step 1's end"
  )
  // unannounced, step 2 waits for a sweeper to announce it once it is UNANNOUNCED_AFTER_MS old by
  // the database's clock: it is made that old instead of the test waiting for it
  await first.db.execute(sql`
    update runs set created_at = created_at - make_interval(secs => ${UNANNOUNCED_AFTER_MS / 1000 + 1})
    where root_run_id = ${root.id} and status = 'queued'`)

  const second = await buildSkillsApp(t, { db: first.testDb, env: { RUN_SWEEP_MS: '200', RUN_LEASE_MS: '2000' } })
  const runs = await waitFor(
    'the other instance ran the rest',
    async () => {
      const all = rowsOf<{ id: string; parent_run_id: string | null; status: string; metadata: unknown }>(
        await second.db.execute(sql`
      select id, parent_run_id, status, metadata from runs where root_run_id = ${root.id} order by id`)
      )
      return all.length === 3 && all.every((r) => r.status === 'succeeded') ? all : null
    },
    30_000
  )
  t.same(
    runs.map((r) => r.parent_run_id),
    [null, runs[0]!.id, runs[1]!.id]
  )
  const queued = rowsOf<{ run_id: string; n: number }>(
    await second.db.execute(sql`
    select run_id, count(*)::int as n from run_events where root_run_id = ${root.id} and type = 'run.started' group by run_id`)
  )
  t.ok(queued.length === 3 && queued.every((r) => r.n === 1), 'each step started once')
  t.same(rowsOf(await second.db.execute(sql`select current_step from playbook_runs where root_run_id = ${root.id}`)), [
    { current_step: 2 }
  ])
})

t.test(
  "a step's response format stored under earlier rules: the step before it still ends, the step fails at its output check",
  async (t) => {
    // no worker here: the playbook's stored steps are rewritten before its first step runs
    const api = await buildSkillsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
    const owner = await signUpWithOrg(api)
    const headers = { cookie: owner.cookie }
    const steps = await skillsOf(api, owner.cookie, 3)
    const p = (
      await api.inject({
        method: 'POST',
        url: '/api/playbooks',
        headers,
        payload: { name: 'Old', steps: steps.map((skillId) => ({ skillId, input: 'go' })) }
      })
    ).json().playbook
    const refused = { type: 'json_schema', name: 's', schema: { $ref: '#' } }
    // asked for now, such a schema is refused before anything starts
    const asked = await api.inject({
      method: 'POST',
      url: `/api/playbooks/${p.id}/run`,
      headers,
      payload: { responseFormat: refused }
    })
    t.equal(asked.statusCode, 400)
    t.match(asked.json(), { error: 'validation_failed', message: /recursive schemas are not accepted/ })
    t.same(rowsOf(await api.db.execute(sql`select count(*)::int as n from playbook_runs`)), [{ n: 0 }])

    const first = (await api.inject({ method: 'POST', url: `/api/playbooks/${p.id}/run`, headers })).json().run
    // as if stored before the schema rules grew: the second step carries a schema now refused
    await api.db.execute(sql`
      update playbook_runs set steps = jsonb_set(steps, '{1,settings}', ${JSON.stringify({ responseFormat: refused })}::jsonb)
      where root_run_id = ${first.id}`)

    const worker = await buildSkillsApp(t, { db: api.testDb })
    const runs = await waitFor('the second step ended', async () => {
      const all = await threadRuns(worker, headers, first.id)
      return all.length === 2 && all[1]!.status !== 'queued' && all[1]!.status !== 'running' ? all : null
    })
    t.match(runs, [
      { status: 'succeeded', parentRunId: null },
      {
        status: 'failed',
        parentRunId: first.id,
        error: /^output_invalid: the output could not be checked against the schema/,
        settings: { responseFormat: refused }
      }
    ])
    t.same(
      rowsOf(await worker.db.execute(sql`select current_step from playbook_runs where root_run_id = ${first.id}`)),
      [{ current_step: 1 }],
      'the failed step ends the playbook'
    )
  }
)
