import { and, eq } from 'drizzle-orm'
import t from 'tap'
import { claimNext } from '../../src/runs/runs-repo.js'
import { runs } from '../../src/runs/tables.js'
import { signUpWithOrg } from '../helper.js'
import skillsRoutes from '../../src/skills/index.js'
import { buildRunsApp } from './group.js'

// RUN_QUEUE_MAX_PER_ORG: an org whose queued runs reach the limit is refused the next one
// (429 rate_limited, Retry-After), nothing is stored, and other orgs are not affected.
// Nothing executes here (RUN_WORKER_CONCURRENCY=0), so what is queued stays queued.
// The claim serves the org with the fewest runs running first.

t.test(
  'a full queue answers 429 with Retry-After and stores nothing; another org, a replay and a freed place are served',
  async (t) => {
    const app = await buildRunsApp(t, {
      env: { RUN_QUEUE_MAX_PER_ORG: '3', RUN_WORKER_CONCURRENCY: '0' },
      routes: [skillsRoutes]
    })
    const a = await signUpWithOrg(app)
    const b = await signUpWithOrg(app)
    const post = (cookie: string, prompt: string, headers: Record<string, string> = {}) =>
      app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie, ...headers },
        payload: { prompt, engine: 'echo' }
      })
    const queuedOf = async (orgId: string) =>
      (
        await app.db
          .select({ id: runs.id })
          .from(runs)
          .where(and(eq(runs.orgId, orgId), eq(runs.status, 'queued')))
      ).length

    const first = await post(a.cookie, 'one', { 'idempotency-key': 'first-run' })
    t.equal(first.statusCode, 201)
    t.equal((await post(a.cookie, 'two')).statusCode, 201)
    // a follow-up in a thread counts like any run
    const followUp = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: a.cookie },
      payload: { prompt: 'three', engine: 'echo', rootRunId: first.json().run.id }
    })
    t.equal(followUp.statusCode, 201, followUp.body)

    const refused = await post(a.cookie, 'four', { 'idempotency-key': 'fourth-run' })
    t.equal(refused.statusCode, 429)
    t.match(refused.json(), { error: 'rate_limited', message: /queued runs/ })
    t.ok(Number(refused.headers['retry-after']) >= 1, 'Retry-After in seconds')
    t.equal(await queuedOf(a.org.id), 3, 'nothing was stored')
    const skill = await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers: { cookie: a.cookie },
      payload: { name: 'greet', description: 'greets', instructions: 'Say hello.' }
    })
    t.equal(skill.statusCode, 201, skill.body)
    const viaSkill = await app.inject({
      method: 'POST',
      url: `/api/skills/${skill.json().skill.id}/run`,
      headers: { cookie: a.cookie },
      payload: { input: 'hi', engine: 'echo' }
    })
    t.equal(viaSkill.statusCode, 429, 'a skill run waits in the same queue')

    t.equal((await post(b.cookie, 'another org')).statusCode, 201, 'the limit is per organization')
    const replay = await post(a.cookie, 'one', { 'idempotency-key': 'first-run' })
    t.equal(replay.statusCode, 201, 'a retry of an accepted run replays its answer')
    t.equal(replay.json().run.id, first.json().run.id)

    // a place frees: the refused request, retried with its key, is accepted now
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: `/api/runs/${first.json().run.id}/cancel`,
          headers: { cookie: a.cookie }
        })
      ).statusCode,
      200
    )
    const retried = await post(a.cookie, 'four', { 'idempotency-key': 'fourth-run' })
    t.equal(retried.statusCode, 201, retried.body)
    t.equal(await queuedOf(a.org.id), 3)
  }
)

t.test('RUN_QUEUE_MAX_PER_ORG=0 sets no limit', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_QUEUE_MAX_PER_ORG: '0', RUN_WORKER_CONCURRENCY: '0' } })
  const a = await signUpWithOrg(app)
  for (let i = 0; i < 5; i++) {
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: '/api/runs',
          headers: { cookie: a.cookie },
          payload: { prompt: `run ${i}`, engine: 'echo' }
        })
      ).statusCode,
      201
    )
  }
})

t.test(
  'fair claiming: the next run taken is that of the org with the fewest running, so a flood does not hold another org back',
  async (t) => {
    const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
    const a = await signUpWithOrg(app)
    const b = await signUpWithOrg(app)
    const start = async (cookie: string, prompt: string) =>
      (
        await app.inject({ method: 'POST', url: '/api/runs', headers: { cookie }, payload: { prompt, engine: 'echo' } })
      ).json().run.id as string
    const flood: string[] = []
    for (let i = 0; i < 40; i++) flood.push(await start(a.cookie, `flood ${i}`))
    const late = await start(b.cookie, 'one run, after the flood')
    const claim = async () =>
      (await claimNext(app.db, { instanceId: 'test-worker', leaseMs: 60_000, budgetBytes: 100_000 })).claimed?.run.id

    t.equal(await claim(), flood[0], 'with nothing running anywhere, the oldest run goes first')
    t.equal(await claim(), late, 'then the org with nothing running, ahead of 39 older runs of the busy org')
    t.equal(await claim(), flood[1], 'both orgs running one: the oldest again')
    t.equal(await claim(), flood[2], 'the only org with queued runs: first in, first out')
    const [row] = await app.db.select({ status: runs.status }).from(runs).where(eq(runs.id, late))
    t.equal(row!.status, 'running')

    // a claim says whether other runs wait, so a worker knows when looking again can find one
    const next = () => claimNext(app.db, { instanceId: 'test-worker', leaseMs: 60_000, budgetBytes: 100_000 })
    for (let i = 3; i < 39; i++) t.equal((await next()).waiting, true, 'more of the flood waits')
    const last = await next()
    t.same([last.claimed?.run.id, last.waiting], [flood[39], false], 'the last queued run: nothing else waits')
    t.same(await next(), { claimed: null, waiting: false }, 'an empty queue')
    const turn = await start(b.cookie, 'a thread whose next turn must wait')
    const follow = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: b.cookie },
        payload: { prompt: 'second turn', engine: 'echo', rootRunId: turn }
      })
    ).json().run.id as string
    t.equal((await next()).claimed?.run.id, turn)
    t.same(
      await next(),
      { claimed: null, waiting: true },
      'the second turn waits for the first to end: nothing to take, but a run waits'
    )
    t.ok(follow)
  }
)
