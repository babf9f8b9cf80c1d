import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { memoryRecalls } from '../../src/memory/tables.js'
import { buildTestApp } from '../helper.js'
import { addFacts, addUser, FAST, runRef } from './helpers.js'

t.test('every retrieval for a run records a frame; the ledger lists, filters and pages them', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  const alice = await addUser(app, DEV_ORG.id)
  await addFacts(app.db, DEV_ORG.id, 'org', '', ['The standup is at nine'])
  await addFacts(app.db, DEV_ORG.id, 'personal', alice.userId!, ['Alice skips the standup on Fridays'])

  const devRun = runRef(DEV_ORG.id)
  const recalled = await app.memory.forRuns.recall(devRun, 'standup', { kind: 'prompt' })
  t.same(
    recalled.items.map((i) => [i.content, i.sourceScope]),
    [['The standup is at nine', 'org']],
    'no real user: the org pool only'
  )

  const aliceRun = runRef(DEV_ORG.id, alice.userId)
  const both = await app.memory.forRuns.recall(aliceRun, 'standup', { kind: 'prompt' })
  t.same(both.items.map((i) => i.sourceScope).sort(), ['org', 'personal'], 'a real user: org and personal pools')

  const child = { ...runRef(DEV_ORG.id), rootRunId: aliceRun.id }
  await app.memory.forRuns.recall(child, 'nothing matches this', { kind: 'prompt' })

  const list = await app.inject({ method: 'GET', url: '/api/memory/recalls' })
  t.equal(list.statusCode, 200)
  const { recalls, nextCursor } = list.json()
  t.equal(recalls.length, 4)
  t.equal(nextCursor, null)
  t.same(Object.keys(recalls[0]).sort(), [
    'createdAt',
    'id',
    'itemIds',
    'latencyMs',
    'mode',
    'query',
    'rootRunId',
    'runId',
    'scope',
    'session'
  ])
  t.match(recalls[0], {
    runId: child.id,
    rootRunId: aliceRun.id,
    scope: 'org',
    query: 'nothing matches',
    itemIds: [],
    session: { runId: child.id, rootRunId: aliceRun.id }
  })
  const devFrame = recalls.find((r: { runId: string }) => r.runId === devRun.id)
  t.same(devFrame.itemIds, [recalled.items[0]!.id])
  t.type(devFrame.latencyMs, 'number')

  const byRun = (await app.inject({ method: 'GET', url: `/api/memory/recalls?runId=${aliceRun.id}` })).json().recalls
  t.same(byRun.map((r: { scope: string }) => r.scope).sort(), ['org', 'personal'])
  const byRoot = (await app.inject({ method: 'GET', url: `/api/memory/recalls?rootRunId=${aliceRun.id}` })).json()
    .recalls
  t.equal(byRoot.length, 3, 'the thread: the root run and its child')

  const page1 = (await app.inject({ method: 'GET', url: '/api/memory/recalls?limit=3' })).json()
  t.equal(page1.recalls.length, 3)
  t.ok(page1.nextCursor)
  const page2 = (
    await app.inject({ method: 'GET', url: `/api/memory/recalls?limit=3&cursor=${page1.nextCursor}` })
  ).json()
  t.equal(page2.recalls.length, 1)
  t.equal(page2.nextCursor, null)
  t.same(
    [...page1.recalls, ...page2.recalls].map((r: { id: string }) => r.id),
    recalls.map((r: { id: string }) => r.id),
    'newest first, no overlap'
  )
})

t.test('memory off for the org: nothing is recalled and no frame is recorded', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  await addFacts(app.db, DEV_ORG.id, 'org', '', ['A fact'])
  await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: false } })
  t.same(await app.memory.forRuns.recall(runRef(DEV_ORG.id), 'fact', { kind: 'prompt' }), {
    items: [],
    query: 'fact',
    // read by the recall's own statement, for the run to use again
    settings: { enabled: false, extract: false }
  })
  t.equal((await app.db.select().from(memoryRecalls)).length, 0)
})
