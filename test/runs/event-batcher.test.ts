import { inArray } from 'drizzle-orm'
import t from 'tap'
import type { BusEvent } from '../../plugins/event-bus.js'
import { newId } from '../../src/db/ids.js'
import { EventBatcher } from '../../src/runs/events.js'
import { runEvents } from '../../src/runs/tables.js'
import { buildRunsApp } from './group.js'
import { eventually } from './sse-client.js'

const env = { RUN_WORKER_CONCURRENCY: '0' }

t.test('events appended at once share statements; each caller gets its own stored row', async (t) => {
  const app = await buildRunsApp(t, { env })
  await app.eventBus.ready
  const orgs = [newId(), newId(), newId()]
  const heard = new Map<string, number[]>(orgs.map((o) => [o, []]))
  for (const org of orgs) t.teardown(app.eventBus.subscribe(org, (e: BusEvent) => heard.get(org)!.push(e.id)))

  const batcher = new EventBatcher(app.db)
  const sent = Array.from({ length: 300 }, (_, i) => ({
    orgId: orgs[i % 3]!,
    runId: `run-${i}`,
    rootRunId: `root-${i % 7}`,
    type: i % 2 ? 'message.delta' : 'tool.call',
    data: { i, text: `word ${i}` }
  }))
  const stored = await Promise.all(sent.map((e) => batcher.append(e)))

  t.equal(new Set(stored.map((e) => e.id)).size, 300, 'every event has its own id')
  const rows = await app.db
    .select()
    .from(runEvents)
    .where(
      inArray(
        runEvents.id,
        stored.map((e) => e.id)
      )
    )
  const byId = new Map(rows.map((r) => [r.id, r]))
  t.equal(rows.length, 300, 'all stored')
  const mismatched = stored.filter((e, i) => {
    const row = byId.get(e.id)!
    return (
      row.runId !== sent[i]!.runId ||
      row.orgId !== sent[i]!.orgId ||
      row.type !== sent[i]!.type ||
      (row.data as { i: number }).i !== i
    )
  })
  t.same(mismatched, [], 'each promise resolved with the id of its own event')

  // every org hears its events, in id order (streams skip an id at or below the last sent)
  await eventually(async () => orgs.every((o) => heard.get(o)!.length === 100))
  for (const org of orgs) {
    const ids = heard.get(org)!
    t.same(
      ids,
      [...ids].sort((a, b) => a - b),
      'NOTIFYs of an org arrive in id order'
    )
  }
})

t.test('an event the database refuses fails alone; its batch neighbours are stored', async (t) => {
  const app = await buildRunsApp(t, { env })
  const batcher = new EventBatcher(app.db)
  const org = newId()
  const good = (i: number) =>
    batcher.append({ orgId: org, runId: `run-${i}`, rootRunId: 'root', type: 'tool.call', data: { i } })
  // jsonb refuses \u0000, so this event cannot be stored
  const results = await Promise.allSettled([
    good(1),
    good(2),
    batcher.append({
      orgId: org,
      runId: 'bad',
      rootRunId: 'root',
      type: 'tool.call',
      data: { text: 'nul \u0000 here' }
    }),
    good(3)
  ])
  t.same(
    results.map((r) => r.status),
    ['fulfilled', 'fulfilled', 'rejected', 'fulfilled']
  )
  const rows = await app.db
    .select()
    .from(runEvents)
    .where(inArray(runEvents.runId, ['run-1', 'run-2', 'run-3', 'bad']))
  t.same(rows.map((r) => r.runId).sort(), ['run-1', 'run-2', 'run-3'])
})

t.test('an event too big for a NOTIFY is announced without its data, which readers load', async (t) => {
  const app = await buildRunsApp(t, { env })
  await app.eventBus.ready
  const org = newId()
  const heard: BusEvent[] = []
  t.teardown(app.eventBus.subscribe(org, (e) => heard.push(e)))
  const batcher = new EventBatcher(app.db)
  const text = 'x'.repeat(9000)
  const [small, big] = await Promise.all([
    batcher.append({ orgId: org, runId: 'r1', rootRunId: 'r1', type: 'message.completed', data: { text: 'short' } }),
    batcher.append({ orgId: org, runId: 'r2', rootRunId: 'r2', type: 'message.completed', data: { text } })
  ])
  await eventually(async () => heard.length === 2)
  const bySmall = heard.find((e) => e.id === small!.id)!
  const byBig = heard.find((e) => e.id === big!.id)!
  t.same(bySmall.data, { text: 'short' })
  t.equal(bySmall.big, false)
  t.equal(byBig.big, true, 'flagged big')
  t.same(big!.data, { text }, 'the caller still gets its data')
})
