import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { as, createOrg, FAST, memoryTestApp, startMem0 } from './helpers.js'

t.test('http backend: browse, search, patch, delete and history against a mem0 service', async (t) => {
  const mem0 = await startMem0(t)
  const app = await memoryTestApp(t, {
    env: { ...FAST, MEMORY_BACKEND: 'http', MEMORY_URL: mem0.url, MEMORY_CAPTURE_WORKER: 'false' }
  })
  const other = await createOrg(app, 'org-other')
  const now = new Date().toISOString()
  mem0.store.set('m-1', {
    id: 'm-1',
    memory: 'Invoices go out on the first',
    user_id: `cairn:${DEV_ORG.id}`,
    metadata: { run_id: 'run-9' },
    created_at: now,
    updated_at: now
  })
  mem0.store.set('m-2', {
    id: 'm-2',
    memory: 'Other org invoices are secret',
    user_id: `cairn:${other.orgId}`,
    metadata: {},
    created_at: now,
    updated_at: now
  })

  // the pool identity exists once something was written; a capture round creates it
  const { ensurePool } = await import('../../src/memory/pools.js')
  await ensurePool(app.db, DEV_ORG.id, 'org', '')
  await ensurePool(app.db, other.orgId, 'org', '')

  const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json()
  t.match(browse, {
    enabled: true,
    total: 1,
    items: [{ id: 'm-1', content: 'Invoices go out on the first', sourceRunId: 'run-9', sourceScope: 'org' }]
  })
  // this backend's cursor is an offset; anything else is refused before the service is asked
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/browse?cursor=1' })).json().items.length,
    0,
    'the page after the only fact'
  )
  const listed = mem0.state.lists
  for (const bad of ['0', '007', 'abc', Buffer.from('m-1').toString('base64url'), '1234567890']) {
    const res = await app.inject({ method: 'GET', url: `/api/memory/browse?cursor=${bad}` })
    t.equal(res.statusCode, 400, bad)
    t.match(res.json(), { error: 'validation_failed', details: [{ path: '/querystring/cursor' }] })
  }
  t.equal(mem0.state.lists, listed, 'the service was not asked')
  const search = (await app.inject({ method: 'GET', url: '/api/memory/search?q=invoices' })).json()
  t.same(
    search.items.map((i: { id: string }) => i.id),
    ['m-1']
  )
  t.match(search.items[0].citation, { kind: 'memory', id: 'm-1', runId: 'run-9' })

  const foreign = await app.inject({ method: 'PATCH', url: '/api/memory/item/m-2', payload: { content: 'mine now' } })
  t.equal(foreign.statusCode, 404, "another org's upstream id is not in this pool")
  t.equal(foreign.json().error, 'not found in this pool')
  t.equal((await app.inject({ method: 'DELETE', url: '/api/memory/item/m-2' })).statusCode, 404)
  t.equal(mem0.store.get('m-2')!.memory, 'Other org invoices are secret')

  mem0.state.updateMode = 'fail'
  const failed = await app.inject({
    method: 'PATCH',
    url: '/api/memory/item/m-1',
    payload: { content: 'Invoices go out on the second' }
  })
  t.equal(failed.statusCode, 502)
  t.same(failed.json(), { error: 'update failed', message: 'the memory service did not accept the update' })
  t.equal(mem0.store.get('m-1')!.memory, 'Invoices go out on the first')
  mem0.state.updateMode = 'ok'
  t.same(
    (
      await app.inject({
        method: 'PATCH',
        url: '/api/memory/item/m-1',
        payload: { content: 'Invoices go out on the second' }
      })
    ).json(),
    { ok: true }
  )
  t.equal(mem0.store.get('m-1')!.memory, 'Invoices go out on the second')
  t.same((await app.inject({ method: 'DELETE', url: '/api/memory/item/m-1' })).json(), { ok: true, deletedCount: 1 })
  t.notOk(mem0.store.has('m-1'))
  const history = (await app.inject({ method: 'GET', url: '/api/memory/item/m-1/history' })).json().history
  t.match(history, [
    { kind: 'updated', changedBy: 'dev', content: 'Invoices go out on the second' },
    { kind: 'deleted', changedBy: 'dev' }
  ])
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=invoices', headers: as(other.user) })).json().items[0]
      .id,
    'm-2'
  )
})

t.test('http backend: an unreachable service is a 502 on reads, never a 5xx without a body', async (t) => {
  const app = await memoryTestApp(t, {
    env: { ...FAST, MEMORY_BACKEND: 'http', MEMORY_URL: 'http://127.0.0.1:9', MEMORY_CAPTURE_WORKER: 'false' }
  })
  const { ensurePool } = await import('../../src/memory/pools.js')
  await ensurePool(app.db, DEV_ORG.id, 'org', '')
  const res = await app.inject({ method: 'GET', url: '/api/memory/search?q=x' })
  t.equal(res.statusCode, 502)
  t.equal(res.json().error, 'upstream_failed')
  const patch = await app.inject({ method: 'PATCH', url: '/api/memory/item/m-1', payload: { content: 'x' } })
  t.equal(patch.statusCode, 502)
  t.equal(patch.json().error, 'update failed')
})

t.test("http backend: a run recalls with the prompt's significant words; a person adds a fact", async (t) => {
  const mem0 = await startMem0(t)
  const app = await memoryTestApp(t, {
    env: { ...FAST, MEMORY_BACKEND: 'http', MEMORY_URL: mem0.url, MEMORY_CAPTURE_WORKER: 'false' }
  })
  const added = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    payload: { content: 'Invoices go out on the first' }
  })
  t.equal(added.statusCode, 201, added.body)
  t.match(added.json().item, { content: 'Invoices go out on the first', sourceScope: 'org' })
  const stored = [...mem0.store.values()]
  t.match(
    stored,
    [{ memory: 'Invoices go out on the first', user_id: `cairn:${DEV_ORG.id}` }],
    "written to the org's mem0 user"
  )
  const recalled = await app.memory.forRuns.recall(
    { id: 'r1', rootRunId: 'r1', orgId: DEV_ORG.id, realUserId: null },
    'Hello, could you please tell me when the invoices go out this month?',
    { kind: 'prompt' }
  )
  t.same(mem0.state.searches, ['invoices month'], 'the significant words, not the whole prompt')
  t.same(
    recalled.items.map((i) => i.content),
    ['Invoices go out on the first']
  )
  t.equal(recalled.query, 'invoices month')
})
