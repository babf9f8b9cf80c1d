import { sql } from 'drizzle-orm'
import t, { type Test } from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { rowsOf } from '../../src/db/client.js'
import { memoryItems } from '../../src/memory/tables.js'
import { buildTestApp } from '../helper.js'
import { buildMemoryApp } from './group.js'
import { addFacts, FAST } from './helpers.js'

const FAILED_CLOSED = {
  enabled: true,
  scope: 'personal',
  authed: false,
  truncated: false,
  failedClosed: true,
  items: []
}

/** A browse cursor no page handed out is refused, whatever the pool holds (even nothing, even no pool). */
async function refusesBadCursors(t: Test, app: Awaited<ReturnType<typeof buildMemoryApp>>, where: string) {
  for (const query of [
    'cursor=garbage',
    'scope=personal&cursor=garbage',
    `cursor=${Buffer.from('not an id!').toString('base64url')}`
  ]) {
    const res = await app.inject({ method: 'GET', url: `/api/memory/browse?${query}` })
    t.equal(res.statusCode, 400, `${where}: ${query}`)
    t.match(res.json(), { error: 'validation_failed', details: [{ path: '/querystring/cursor' }] })
  }
}

t.test('memory off: reads answer enabled false, writes 403 memory disabled, capabilities.memory false', async (t) => {
  // the whole app: GET /api/config reports what every group offers
  const app = await buildTestApp(t, { env: { MEMORY_BACKEND: 'off' } })
  const config = await app.inject({ method: 'GET', url: '/api/config' })
  t.equal(config.json().capabilities.memory, false)
  const search = await app.inject({ method: 'GET', url: '/api/memory/search?q=anything' })
  t.equal(search.statusCode, 200)
  t.match(search.json(), { enabled: false, scope: 'org', authed: false, truncated: false, items: [] })
  t.type(search.json().latencyMs, 'number')
  const browse = await app.inject({ method: 'GET', url: '/api/memory/browse' })
  t.match(browse.json(), { enabled: false, scope: 'org', authed: false, total: 0, items: [] })
  await refusesBadCursors(t, app, 'memory off')
  for (const [method, url, payload] of [
    ['PATCH', '/api/memory/item/abc', { content: 'x' }],
    ['DELETE', '/api/memory/item/abc', undefined]
  ] as const) {
    const res = await app.inject({ method, url, payload })
    t.equal(res.statusCode, 403, `${method}`)
    t.same(res.json(), { error: 'memory disabled', message: 'memory is disabled for this organization' })
  }
  t.same((await app.inject({ method: 'GET', url: '/api/memory/captures' })).json(), { captures: [], nextCursor: null })
  t.same((await app.inject({ method: 'GET', url: '/api/memory/recalls' })).json(), { recalls: [], nextCursor: null })
  t.match((await app.inject({ method: 'GET', url: '/api/memory/settings' })).json(), { enabled: false, backend: 'off' })
})

t.test('memory on: capabilities.memory true; the dev org never reaches a personal pool', async (t) => {
  const app = await buildTestApp(t, { env: FAST })
  t.equal((await app.inject({ method: 'GET', url: '/api/config' })).json().capabilities.memory, true)
  await refusesBadCursors(t, app, 'an empty pool')
  await addFacts(app.db, DEV_ORG.id, 'org', '', ['The deploy key rotates every Monday'])
  const search = await app.inject({ method: 'GET', url: '/api/memory/search?scope=personal&q=deploy' })
  t.equal(search.statusCode, 200)
  t.match(search.json(), FAILED_CLOSED)
  const browse = await app.inject({ method: 'GET', url: '/api/memory/browse?scope=personal' })
  t.match(browse.json(), { enabled: true, scope: 'personal', authed: false, total: 0, failedClosed: true, items: [] })
  const id = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().items[0].id
  for (const [method, url, payload] of [
    ['PATCH', `/api/memory/item/${id}?scope=personal`, { content: 'changed' }],
    ['PATCH', `/api/memory/item/${id}`, { content: 'changed', scope: 'personal' }],
    ['DELETE', `/api/memory/item/${id}?scope=personal`, undefined]
  ] as const) {
    const res = await app.inject({ method, url, payload })
    t.equal(res.statusCode, 403, `${method} ${url}`)
    t.same(res.json(), { error: 'sign-in required', message: 'personal memory needs a signed-in user' })
  }
  const history = await app.inject({ method: 'GET', url: `/api/memory/item/${id}/history?scope=personal` })
  t.equal(history.statusCode, 403)
  const pools = rowsOf<{ n: number }>(
    await app.db.execute(sql`select count(*)::int as n from memory_pools where scope = 'personal'`)
  )
  t.equal(pools[0]!.n, 0, 'no personal pool was created')
  const [item] = await app.db.select().from(memoryItems)
  t.equal(item!.content, 'The deploy key rotates every Monday', 'nothing was written')
})

t.test('search, browse, patch, delete and history in the org pool', async (t) => {
  const app = await buildMemoryApp(t, { env: FAST })
  const empty = await app.inject({ method: 'GET', url: '/api/memory/search?q=deploy' })
  t.match(
    empty.json(),
    { enabled: true, scope: 'org', authed: false, truncated: false, items: [] },
    'no pool yet: no items'
  )
  const runId = '0190b8f0-0000-7000-8000-00000000aaaa'
  await addFacts(
    app.db,
    DEV_ORG.id,
    'org',
    '',
    ['Staging deploys need a green build', 'The cafeteria closes at three'],
    runId
  )

  const search = await app.inject({ method: 'GET', url: '/api/memory/search?q=deploys&scope=bogus' })
  t.equal(search.statusCode, 200)
  const body = search.json()
  t.equal(body.scope, 'org', 'an invalid scope falls back to org')
  t.equal(body.items.length, 1)
  const hit = body.items[0]
  t.match(hit, {
    content: 'Staging deploys need a green build',
    sourceScope: 'org',
    citation: { kind: 'memory', id: hit.id, runId, rootRunId: runId }
  })
  t.type(hit.score, 'number')
  t.ok(Date.parse(hit.citation.createdAt))
  t.same((await app.inject({ method: 'GET', url: '/api/memory/search?q=' })).json().items, [], 'empty q: no items')
  t.same(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=%20%20' })).json().items,
    [],
    'blank q: no items'
  )

  const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json()
  t.match(browse, { enabled: true, scope: 'org', authed: false, total: 2, nextCursor: null })
  t.equal(browse.items[0].content, 'The cafeteria closes at three', 'newest first')
  t.same(Object.keys(browse.items[0]).sort(), [
    'background',
    'content',
    'createdAt',
    'embedding',
    'id',
    'sourceRunId',
    'sourceScope',
    'updatedAt'
  ])
  t.match(browse.items[0], { background: false, sourceScope: 'org', sourceRunId: runId, embedding: 'pending' })
  const [cafeteria, staging] = browse.items

  const patch = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${staging.id}`,
    payload: { content: 'Staging deploys need two approvals' }
  })
  t.equal(patch.statusCode, 200)
  t.same(patch.json(), { ok: true })
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=approvals' })).json().items[0].content,
    'Staging deploys need two approvals'
  )

  const bg = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${cafeteria.id}`,
    payload: { content: 'The cafeteria closes at four', background: true }
  })
  t.same(bg.json(), { ok: true })
  await app.memory.drain()
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=cafeteria' })).json().items[0].content,
    'The cafeteria closes at four',
    'a background change is applied'
  )

  const missing = await app.inject({
    method: 'PATCH',
    url: '/api/memory/item/0190b8f0-0000-7000-8000-000000000000',
    payload: { content: 'x' }
  })
  t.equal(missing.statusCode, 404)
  t.same(missing.json(), { error: 'not found in this pool', message: 'no memory item with this id in this pool' })
  const missingBg = await app.inject({
    method: 'PATCH',
    url: '/api/memory/item/0190b8f0-0000-7000-8000-000000000000',
    payload: { content: 'x', background: true }
  })
  t.equal(missingBg.statusCode, 404, 'a background change is validated first')

  const del = await app.inject({ method: 'DELETE', url: `/api/memory/item/${staging.id}` })
  t.equal(del.statusCode, 200)
  t.same(del.json(), { ok: true, deletedCount: 1 })
  const again = await app.inject({ method: 'DELETE', url: `/api/memory/item/${staging.id}` })
  t.equal(again.statusCode, 404)
  t.same(again.json(), { error: 'not found in this pool', message: 'no memory item with this id in this pool' })

  const history = await app.inject({ method: 'GET', url: `/api/memory/item/${staging.id}/history` })
  t.equal(history.statusCode, 200)
  t.match(history.json().history, [
    { content: 'Staging deploys need a green build', changedBy: `run:${runId}`, kind: 'created' },
    { content: 'Staging deploys need two approvals', changedBy: 'dev', kind: 'updated' },
    { content: 'Staging deploys need two approvals', changedBy: 'dev', kind: 'deleted' }
  ])
  t.equal(history.json().history.length, 3)
  const noHistory = await app.inject({
    method: 'GET',
    url: '/api/memory/item/0190b8f0-0000-7000-8000-000000000000/history'
  })
  t.equal(noHistory.statusCode, 404)
  t.equal(noHistory.json().error, 'not found in this pool')
})

t.test('limits: search truncates, browse pages with a cursor, oversize limits are capped', async (t) => {
  const app = await buildMemoryApp(t, { env: FAST })
  const facts = Array.from({ length: 130 }, (_, i) => `Release note number ${i} mentions the widget`)
  await addFacts(app.db, DEV_ORG.id, 'org', '', facts)
  const def = (await app.inject({ method: 'GET', url: '/api/memory/search?q=widget' })).json()
  t.equal(def.items.length, 20, 'default limit 20')
  t.equal(def.truncated, true)
  const capped = (await app.inject({ method: 'GET', url: '/api/memory/search?q=widget&limit=1000' })).json()
  t.equal(capped.items.length, 100, 'at most 100')
  t.equal(capped.truncated, true)
  const narrow = (
    await app.inject({ method: 'GET', url: '/api/memory/search?q=number%2042%20widget&limit=100' })
  ).json()
  t.equal(narrow.truncated, false, 'not truncated when everything fits')

  const seen = new Set<string>()
  let cursor: string | null = null
  let pages = 0
  do {
    const res: { json(): { total: number; items: Array<{ id: string }>; nextCursor: string | null } } =
      await app.inject({ method: 'GET', url: `/api/memory/browse?limit=50${cursor ? `&cursor=${cursor}` : ''}` })
    const page: { total: number; items: Array<{ id: string }>; nextCursor: string | null } = res.json()
    t.equal(page.total, 130)
    for (const item of page.items) seen.add(item.id)
    cursor = page.nextCursor
    pages++
  } while (cursor && pages < 10)
  t.equal(pages, 3)
  t.equal(seen.size, 130, 'every fact once across pages')
  t.equal((await app.inject({ method: 'GET', url: '/api/memory/browse?limit=5000' })).json().items.length, 130)
})

t.test('settings: an admin turns memory off for the org, then on again', async (t) => {
  const app = await buildMemoryApp(t, { env: FAST })
  await addFacts(app.db, DEV_ORG.id, 'org', '', ['Lunch is at noon'])
  const id = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().items[0].id
  t.same((await app.inject({ method: 'GET', url: '/api/memory/settings' })).json(), {
    enabled: true,
    extract: false,
    orgEnabled: true,
    backend: 'postgres'
  })
  const off = await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: false } })
  t.equal(off.statusCode, 200)
  t.same(off.json(), { enabled: false, extract: false, orgEnabled: false, backend: 'postgres' })
  t.match((await app.inject({ method: 'GET', url: '/api/memory/search?q=lunch' })).json(), {
    enabled: false,
    items: []
  })
  t.match((await app.inject({ method: 'GET', url: '/api/memory/browse' })).json(), {
    enabled: false,
    total: 0,
    items: []
  })
  const patch = await app.inject({ method: 'PATCH', url: `/api/memory/item/${id}`, payload: { content: 'x' } })
  t.equal(patch.statusCode, 403)
  t.equal(patch.json().error, 'memory disabled')
  t.equal((await app.inject({ method: 'DELETE', url: `/api/memory/item/${id}` })).json().error, 'memory disabled')
  const on = await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: true } })
  t.same(on.json(), { enabled: true, extract: false, orgEnabled: true, backend: 'postgres' })
  t.equal(
    (await app.inject({ method: 'GET', url: '/api/memory/search?q=lunch' })).json().items.length,
    1,
    'the facts are still there'
  )
  const bad = await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: 'no' } })
  t.equal(bad.statusCode, 400)
})

t.test('bad input is a clear 4xx, never a 5xx, and changes nothing', async (t) => {
  const app = await buildMemoryApp(t, { env: FAST })
  await addFacts(app.db, DEV_ORG.id, 'org', '', ['Keep this fact'])
  const id = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().items[0].id
  const cases: Array<{
    method: 'PATCH' | 'DELETE' | 'GET' | 'POST' | 'PUT'
    url: string
    payload?: string | object
    headers?: Record<string, string>
    status: number
    error: string
  }> = [
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: '{"content":',
      headers: { 'content-type': 'application/json' },
      status: 400,
      error: 'invalid_json'
    },
    { method: 'PATCH', url: `/api/memory/item/${id}`, payload: {}, status: 400, error: 'validation_failed' },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: { content: '' },
      status: 400,
      error: 'validation_failed'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: { content: '   ' },
      status: 400,
      error: 'validation_failed'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: { content: 42 },
      status: 400,
      error: 'validation_failed'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: { content: 'x', background: 'yes' },
      status: 400,
      error: 'validation_failed'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: { content: 'x', orgId: 'other' },
      status: 400,
      error: 'server_owned_field'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: '{"content":"x","__proto__":{"a":1}}',
      headers: { 'content-type': 'application/json' },
      status: 400,
      error: 'invalid_json'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: { content: 'x'.repeat(5000) },
      status: 400,
      error: 'validation_failed'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: JSON.stringify({ content: 'x'.repeat(2_000_000) }),
      headers: { 'content-type': 'application/json' },
      status: 413,
      error: 'payload_too_large'
    },
    {
      method: 'PATCH',
      url: `/api/memory/item/${id}`,
      payload: '<content>x</content>',
      headers: { 'content-type': 'application/xml' },
      status: 415,
      error: 'unsupported_media_type'
    },
    {
      method: 'PATCH',
      url: '/api/memory/item/..%2F..%2Fetc',
      payload: { content: 'x' },
      status: 400,
      error: 'validation_failed'
    },
    { method: 'DELETE', url: `/api/memory/item/${'a'.repeat(100)}`, status: 400, error: 'validation_failed' },
    { method: 'DELETE', url: "/api/memory/item/1'%20or%201=1", status: 400, error: 'validation_failed' },
    { method: 'GET', url: '/api/memory/search?q=x&limit=abc', status: 400, error: 'validation_failed' },
    { method: 'GET', url: '/api/memory/search?q=x&limit=0', status: 400, error: 'validation_failed' },
    { method: 'GET', url: '/api/memory/search?q=x&other=1', status: 400, error: 'validation_failed' },
    { method: 'GET', url: `/api/memory/search?q=${'x'.repeat(3000)}`, status: 400, error: 'validation_failed' },
    { method: 'GET', url: '/api/memory/browse?limit=-1', status: 400, error: 'validation_failed' },
    {
      method: 'POST',
      url: '/api/memory/captures/run-1/resolve',
      payload: { resolution: 'maybe' },
      status: 400,
      error: 'validation_failed'
    },
    { method: 'POST', url: '/api/memory/captures/run-1/resolve', payload: {}, status: 400, error: 'validation_failed' },
    {
      method: 'POST',
      url: '/api/memory/captures/run-1/resolve',
      payload: { resolution: 'discard', extra: 1 },
      status: 400,
      error: 'validation_failed'
    },
    { method: 'POST', url: '/api/memory/captures/%00/retry', status: 400, error: 'validation_failed' },
    { method: 'GET', url: '/api/memory/recalls?limit=500', status: 400, error: 'validation_failed' },
    { method: 'GET', url: '/api/memory/captures?state=weird', status: 400, error: 'validation_failed' },
    {
      method: 'PUT',
      url: '/api/memory/settings',
      payload: { enabled: true, orgId: 'x' },
      status: 400,
      error: 'server_owned_field'
    }
  ]
  for (const c of cases) {
    const res = await app.inject({ method: c.method, url: c.url, payload: c.payload as string, headers: c.headers })
    t.equal(
      res.statusCode,
      c.status,
      `${c.method} ${c.url.slice(0, 80)} ${JSON.stringify(c.payload ?? '').slice(0, 60)}`
    )
    t.equal(res.json().error, c.error)
    t.type(res.json().message, 'string')
  }
  const items = await app.db.select().from(memoryItems)
  t.equal(items.length, 1)
  t.equal(items[0]!.content, 'Keep this fact', 'nothing changed')
  const hostileQuery = await app.inject({
    method: 'GET',
    url: `/api/memory/search?q=${encodeURIComponent("'); drop table memory_items; -- :* & | ! <-> \\")}`
  })
  t.equal(hostileQuery.statusCode, 200, 'tsquery syntax in q is just text')
  t.equal((await app.db.select().from(memoryItems)).length, 1)
})
