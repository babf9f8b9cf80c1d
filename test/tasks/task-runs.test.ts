import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { buildTestApp, signUpWithOrg, waitFor } from '../helper.js'

t.test('a task run: doing with its run at once, done when the run succeeds; idempotent', async (t) => {
  const app = await buildTestApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const task = (
    await app.inject({
      method: 'POST',
      url: '/api/tasks',
      headers,
      payload: { title: 'Summarize the incident', description: 'Keep it short.' }
    })
  ).json().task
  // a response format the output check could not run is refused before the task moves
  const refused = await app.inject({
    method: 'POST',
    url: `/api/tasks/${task.id}/run`,
    headers,
    payload: { responseFormat: { type: 'json_schema', name: 's', schema: { $ref: '#' } } }
  })
  t.equal(refused.statusCode, 400)
  t.match(refused.json(), { error: 'validation_failed', message: /recursive schemas are not accepted/ })
  t.match((await app.inject({ method: 'GET', url: `/api/tasks/${task.id}`, headers })).json().task, {
    status: 'todo',
    runId: null,
    revision: 1
  })
  const started = await app.inject({
    method: 'POST',
    url: `/api/tasks/${task.id}/run`,
    headers: { ...headers, 'idempotency-key': 'task-1' }
  })
  t.equal(started.statusCode, 201)
  const { run, task: doing } = started.json()
  t.match(run, { prompt: 'Summarize the incident\n\nKeep it short.', origin: 'web', metadata: { taskId: task.id } })
  t.match(doing, { status: 'doing', runId: run.id, revision: 2 })
  const replay = await app.inject({
    method: 'POST',
    url: `/api/tasks/${task.id}/run`,
    headers: { ...headers, 'idempotency-key': 'task-1' }
  })
  t.same(replay.json(), started.json(), 'replayed as first answered')
  const done = await waitFor('the task is done', async () => {
    const current = (await app.inject({ method: 'GET', url: `/api/tasks/${task.id}`, headers })).json().task
    return current.status === 'done' ? current : null
  })
  t.match(done, { runId: run.id, revision: 3 })
  t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from runs`)), [{ n: 1 }])
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/tasks/0190b8f0-0000-7000-8000-000000000000/run', headers }))
      .statusCode,
    404
  )
})
