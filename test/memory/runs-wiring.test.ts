import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { buildTestApp } from '../helper.js'

/** The default app: runs recall from and capture into the Memory Hub (echo engine). */
t.test('an echo run recalls, captures its "remember" sentences, and a later run recalls them', async (t) => {
  const app = await buildTestApp(t)
  const events = async (runId: string) =>
    rowsOf<{ type: string; data: Record<string, unknown> }>(
      await app.db.execute(sql`select type, data from run_events where run_id = ${runId} order by id`)
    )
  const waitFor = async (runId: string, type: string) => {
    for (let i = 0; i < 300; i++) {
      const found = (await events(runId)).find((e) => e.type === type)
      if (found) return found
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    throw new Error(`no ${type} for ${runId}`)
  }

  const first = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: 'Please REMEMBER the blue door. Say hello. Also remember: tea at four.' }
  })
  t.equal(first.statusCode, 201)
  const firstId = first.json().run.id as string
  const captured = await waitFor(firstId, 'memory.captured')
  t.match(captured.data, { runId: firstId, itemCount: 2 })
  const types = (await events(firstId)).map((e) => e.type)
  t.ok(types.indexOf('memory.recalled') < types.indexOf('message.delta'), 'recall happens before the answer')
  t.ok(types.indexOf('run.succeeded') < types.indexOf('memory.captured'), 'captured after the run finished')

  const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json()
  t.same(browse.items.map((i: { content: string }) => i.content).sort(), [
    'Also remember: tea at four.',
    'Please REMEMBER the blue door.'
  ])
  t.ok(browse.items.every((i: { sourceRunId: string }) => i.sourceRunId === firstId))

  const captures = (await app.inject({ method: 'GET', url: '/api/memory/captures' })).json().captures
  t.match(captures, [{ runId: firstId, state: 'delivered', itemCount: 2 }])

  const second = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'which blue door' } })
  const secondId = second.json().run.id as string
  const recalled = await waitFor(secondId, 'memory.recalled')
  const doorId = browse.items.find((i: { content: string }) => i.content.includes('blue door')).id
  t.ok((recalled.data.itemIds as string[]).includes(doorId), 'the fact captured by the first run is recalled')
  await waitFor(secondId, 'run.succeeded')
  t.equal(
    (await events(secondId)).filter((e) => e.type === 'memory.captured').length,
    0,
    'nothing to remember, no capture'
  )

  const recalls = (await app.inject({ method: 'GET', url: `/api/memory/recalls?runId=${secondId}` })).json().recalls
  t.ok(recalls.length >= 1)
  t.match(recalls[0], {
    runId: secondId,
    rootRunId: secondId,
    scope: 'org',
    query: 'blue door',
    session: { runId: secondId, rootRunId: secondId }
  })
  t.ok(recalls[0].itemIds.includes(doorId))
  t.equal((await app.inject({ method: 'GET', url: '/api/config' })).json().capabilities.memory, true)
})
