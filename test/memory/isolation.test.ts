import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { memoryCaptures, memoryItems } from '../../src/memory/tables.js'
import { addFacts, addUser, as, createOrg, devCaller, keyCaller, memoryTestApp, runRef } from './helpers.js'

t.test('org B cannot search, browse, patch, delete, read history, retry or resolve anything of org A', async (t) => {
  const app = await memoryTestApp(t, { env: { MEMORY_CAPTURE_WORKER: 'false' } })
  const a = await createOrg(app, 'org-a')
  const b = await createOrg(app, 'org-b')
  await addFacts(app.db, a.orgId, 'org', '', ['Org A secret: the launch code is tangerine'])
  await addFacts(app.db, b.orgId, 'org', '', ['Org B knows about tangerines too'])
  const itemA = (await app.inject({ method: 'GET', url: '/api/memory/browse', headers: as(a.user) })).json().items[0]
  t.match(itemA, { content: 'Org A secret: the launch code is tangerine' })

  const search = (
    await app.inject({ method: 'GET', url: '/api/memory/search?q=tangerine', headers: as(b.user) })
  ).json()
  t.same(
    search.items.map((i: { content: string }) => i.content),
    ['Org B knows about tangerines too']
  )
  const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse', headers: as(b.user) })).json()
  t.equal(browse.total, 1)
  t.notOk(browse.items.some((i: { id: string }) => i.id === itemA.id))

  for (const scope of ['org', 'personal']) {
    const patch = await app.inject({
      method: 'PATCH',
      url: `/api/memory/item/${itemA.id}?scope=${scope}`,
      headers: as(b.user),
      payload: { content: 'pwned' }
    })
    t.equal(patch.statusCode, 404, `patch ${scope}`)
    t.equal(patch.json().error, 'not found in this pool')
    const del = await app.inject({
      method: 'DELETE',
      url: `/api/memory/item/${itemA.id}?scope=${scope}`,
      headers: as(b.user)
    })
    t.equal(del.statusCode, 404, `delete ${scope}`)
    t.equal(del.json().error, 'not found in this pool')
    const history = await app.inject({
      method: 'GET',
      url: `/api/memory/item/${itemA.id}/history?scope=${scope}`,
      headers: as(b.user)
    })
    t.equal(history.statusCode, 404, `history ${scope}`)
  }
  const bgPatch = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${itemA.id}`,
    headers: as(b.user),
    payload: { content: 'pwned', background: true }
  })
  t.equal(bgPatch.statusCode, 404)

  // captures of org A: one dead, one orphan
  const dead = runRef(a.orgId)
  const orphan = runRef(a.orgId)
  await app.db.transaction(async (tx) => {
    await app.memory.forRuns.enqueueCapture(tx, dead, ['Remember A dead'])
    await app.memory.forRuns.enqueueCapture(tx, orphan, ['Remember A orphan'])
  })
  await app.db.execute(sql`update memory_captures set state = 'dead', attempts = 8 where run_id = ${dead.id}`)
  await app.db.execute(
    sql`update memory_captures set state = 'delivering', attempts = 1, lease_expires_at = now() - interval '1 minute' where run_id = ${orphan.id}`
  )
  t.same(
    (await app.inject({ method: 'GET', url: '/api/memory/captures', headers: as(b.user) })).json().captures,
    [],
    "B lists none of A's captures"
  )
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/captures', headers: as(a.user) })).json().captures.length,
    2
  )
  const retry = await app.inject({ method: 'POST', url: `/api/memory/captures/${dead.id}/retry`, headers: as(b.user) })
  t.equal(retry.statusCode, 404)
  t.equal(retry.json().error, 'no dead capture for this run in your org')
  for (const resolution of ['delivered', 'discard']) {
    const resolve = await app.inject({
      method: 'POST',
      url: `/api/memory/captures/${orphan.id}/resolve`,
      headers: as(b.user),
      payload: { resolution }
    })
    t.equal(resolve.statusCode, 404)
    t.equal(resolve.json().error, 'no delivering orphan for this run in your org')
  }
  // A's recall frames are A's alone
  await app.memory.forRuns.recall(dead, 'tangerine', { kind: 'prompt' })
  t.same((await app.inject({ method: 'GET', url: '/api/memory/recalls', headers: as(b.user) })).json().recalls, [])
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/memory/recalls?runId=${dead.id}`, headers: as(b.user) })).json()
      .recalls.length,
    0
  )
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/recalls', headers: as(a.user) })).json().recalls.length,
    1
  )

  const states = rowsOf<{ state: string }>(await app.db.execute(sql`select state from memory_captures order by run_id`))
  t.same(states.map((s) => s.state).sort(), ['dead', 'delivering'], "A's captures unchanged")
  const items = await app.db.select().from(memoryItems)
  t.ok(
    items.some((i) => i.content === 'Org A secret: the launch code is tangerine'),
    "A's fact unchanged"
  )
  t.equal((await app.db.select().from(memoryCaptures)).length, 2)

  // B's admin switching memory off does not touch A
  await app.inject({ method: 'PUT', url: '/api/memory/settings', headers: as(b.user), payload: { enabled: false } })
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=tangerine', headers: as(a.user) })).json().items
      .length,
    1
  )
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=tangerine', headers: as(b.user) })).json().enabled,
    false
  )
})

t.test('personal pools: only their owner reaches them; keys and the dev org fail closed', async (t) => {
  const app = await memoryTestApp(t, { env: { MEMORY_CAPTURE_WORKER: 'false' } })
  const org = await createOrg(app, 'org-p')
  const alice = org.user
  const bob = await addUser(app, org.orgId)
  await addFacts(app.db, org.orgId, 'personal', alice.userId!, ['Alice prefers dark roast coffee'])
  await addFacts(app.db, org.orgId, 'org', '', ['The team coffee machine is on floor 3'])

  const mine = (
    await app.inject({ method: 'GET', url: '/api/memory/search?scope=personal&q=coffee', headers: as(alice) })
  ).json()
  t.match(mine, { enabled: true, scope: 'personal', authed: true, truncated: false })
  t.notOk('failedClosed' in mine)
  t.same(
    mine.items.map((i: { content: string; sourceScope: string }) => [i.content, i.sourceScope]),
    [['Alice prefers dark roast coffee', 'personal']]
  )
  const aliceItem = (
    await app.inject({ method: 'GET', url: '/api/memory/browse?scope=personal', headers: as(alice) })
  ).json().items[0]
  t.match(aliceItem, { content: 'Alice prefers dark roast coffee', sourceScope: 'personal' })

  const bobs = (
    await app.inject({ method: 'GET', url: '/api/memory/search?scope=personal&q=coffee', headers: as(bob) })
  ).json()
  t.match(bobs, { enabled: true, scope: 'personal', authed: true, items: [] }, 'Bob sees only his own (empty) pool')
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/browse?scope=personal', headers: as(bob) })).json().total,
    0
  )
  for (const scope of ['personal', 'org']) {
    const patch = await app.inject({
      method: 'PATCH',
      url: `/api/memory/item/${aliceItem.id}`,
      headers: as(bob),
      payload: { content: 'tea', scope }
    })
    t.equal(patch.statusCode, 404, `bob patch ${scope}`)
    t.equal(patch.json().error, 'not found in this pool')
    const del = await app.inject({
      method: 'DELETE',
      url: `/api/memory/item/${aliceItem.id}?scope=${scope}`,
      headers: as(bob)
    })
    t.equal(del.statusCode, 404, `bob delete ${scope}`)
  }
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=coffee', headers: as(bob) })).json().items[0].content,
    'The team coffee machine is on floor 3',
    'the org pool is shared, the personal pool is not'
  )

  const key = await keyCaller(app, org)
  const keySearch = (
    await app.inject({ method: 'GET', url: '/api/memory/search?scope=personal&q=coffee', headers: as(key) })
  ).json()
  t.same(keySearch.items, [])
  t.match(keySearch, { scope: 'personal', authed: false, failedClosed: true })
  const keyBrowse = (
    await app.inject({ method: 'GET', url: '/api/memory/browse?scope=personal', headers: as(key) })
  ).json()
  t.match(keyBrowse, { scope: 'personal', authed: false, failedClosed: true, total: 0, items: [] })
  // a key reaches only memory's read paths
  const keyPatch = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${aliceItem.id}?scope=personal`,
    headers: as(key),
    payload: { content: 'tea' }
  })
  t.equal(keyPatch.statusCode, 401)
  const keyDelete = await app.inject({
    method: 'DELETE',
    url: `/api/memory/item/${aliceItem.id}?scope=personal`,
    headers: as(key)
  })
  t.equal(keyDelete.statusCode, 401)
  // the dev org's fallback principal is never a real user: its personal scope fails closed
  t.match(
    (
      await app.inject({ method: 'GET', url: '/api/memory/search?scope=personal&q=coffee', headers: as(devCaller) })
    ).json(),
    { failedClosed: true, items: [] }
  )
  const devPatch = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${aliceItem.id}?scope=personal`,
    headers: as(devCaller),
    payload: { content: 'tea' }
  })
  t.equal(devPatch.statusCode, 403)
  t.same(devPatch.json(), { error: 'sign-in required', message: 'personal memory needs a signed-in user' })
  t.equal(
    (
      await app.inject({
        method: 'DELETE',
        url: `/api/memory/item/${aliceItem.id}?scope=personal`,
        headers: as(devCaller)
      })
    ).json().error,
    'sign-in required'
  )

  // Alice corrects her own fact; history names her
  const patch = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${aliceItem.id}`,
    headers: as(alice),
    payload: { content: 'Alice prefers oat flat whites', scope: 'personal' }
  })
  t.same(patch.json(), { ok: true })
  const history = (
    await app.inject({
      method: 'GET',
      url: `/api/memory/item/${aliceItem.id}/history?scope=personal`,
      headers: as(alice)
    })
  ).json().history
  t.match(history[history.length - 1], {
    kind: 'updated',
    changedBy: alice.userId,
    content: 'Alice prefers oat flat whites'
  })
  const orgItem = (await app.inject({ method: 'GET', url: '/api/memory/browse', headers: as(key) })).json().items[0]
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/memory/item/${orgItem.id}`, headers: as(key) })).statusCode,
    401,
    'a key reads the org pool but does not change it'
  )
  const bobDelete = await app.inject({ method: 'DELETE', url: `/api/memory/item/${orgItem.id}`, headers: as(bob) })
  t.same(bobDelete.json(), { ok: true, deletedCount: 1 }, 'a member may act on the org pool')
  const orgHistory = rowsOf<{ changed_by: string }>(
    await app.db.execute(sql`select changed_by from memory_item_history where kind = 'deleted'`)
  )
  t.same(
    orgHistory.map((h) => h.changed_by),
    [bob.userId]
  )
  const personalPools = rowsOf<{ owner_key: string }>(
    await app.db.execute(sql`select owner_key from memory_pools where scope = 'personal'`)
  )
  t.same(
    personalPools.map((p) => p.owner_key),
    [alice.userId],
    'no pool was created for anyone else'
  )
})

t.test('only an org admin switches memory for the org', async (t) => {
  const app = await memoryTestApp(t)
  const org = await createOrg(app, 'org-s')
  const member = await addUser(app, org.orgId, 'member')
  const res = await app.inject({
    method: 'PUT',
    url: '/api/memory/settings',
    headers: as(member),
    payload: { enabled: false }
  })
  t.equal(res.statusCode, 403)
  t.equal(res.json().error, 'organization_admin_required')
  t.match((await app.inject({ method: 'GET', url: '/api/memory/settings', headers: as(member) })).json(), {
    enabled: true
  })
  const admin = await addUser(app, org.orgId, 'admin')
  t.equal(
    (await app.inject({ method: 'PUT', url: '/api/memory/settings', headers: as(admin), payload: { enabled: false } }))
      .statusCode,
    200
  )
  t.match((await app.inject({ method: 'GET', url: '/api/memory/settings', headers: as(member) })).json(), {
    enabled: false,
    orgEnabled: false
  })
})
