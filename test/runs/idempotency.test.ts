import { and, eq, sql } from 'drizzle-orm'
import t from 'tap'
import { organizations } from '../../src/auth/tables.js'
import { rowsOf } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import { canonicalJson, fingerprintOf, pruneIdempotencyKeys } from '../../plugins/idempotency/index.js'
import { DEV_USER } from '../../src/auth/dev-org.js'
import { idempotencyKeys } from '../../plugins/idempotency/tables.js'
import { buildRunsApp } from './group.js'

const env = { RUN_WORKER_CONCURRENCY: '0' }
type App = Awaited<ReturnType<typeof buildRunsApp>>

const countRuns = async (app: App) =>
  rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from runs`))[0]!.n
const post = (app: App, key: string | undefined, payload: unknown) =>
  app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: key === undefined ? {} : { 'idempotency-key': key },
    payload: payload as object
  })

t.test('canonical JSON sorts keys at every level', async (t) => {
  t.equal(
    canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: null } }),
    '{"a":{"c":null,"d":[1,{"y":2,"z":1}]},"b":1}'
  )
})

t.test('a retry replays the first answer byte for byte and creates nothing', async (t) => {
  const app = await buildRunsApp(t, { env })
  const first = await post(app, 'k-1', { prompt: 'hello', metadata: { b: 1, a: 2 } })
  t.equal(first.statusCode, 201)
  t.notOk(first.headers['idempotent-replayed'])
  // same body with keys in another order: same fingerprint
  const again = await post(app, 'k-1', { metadata: { a: 2, b: 1 }, prompt: 'hello' })
  t.equal(again.statusCode, 201)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.payload, first.payload, 'byte for byte')
  t.equal(await countRuns(app), 1)
  const [row] = await app.db.select().from(idempotencyKeys)
  t.equal(row!.state, 'done')
  t.equal(row!.responseStatus, 201)
  t.equal(row!.responseBody, first.payload)
  t.equal(row!.route, 'POST /api/runs')
  const hours = (row!.expiresAt.getTime() - row!.createdAt.getTime()) / 3600_000
  t.ok(hours > 23.9 && hours < 24.1, 'kept 24 hours')

  const reused = await post(app, 'k-1', { prompt: 'something else' })
  t.equal(reused.statusCode, 409)
  t.equal(reused.json().error, 'idempotency_key_reused')
  t.equal(await countRuns(app), 1)

  const fresh = await post(app, 'k-2', { prompt: 'hello', metadata: { b: 1, a: 2 } })
  t.equal(fresh.statusCode, 201)
  t.not(fresh.json().run.id, first.json().run.id, 'another key is another run')
  t.equal(await countRuns(app), 2)
})

t.test('invalid keys are 400 and nothing is stored', async (t) => {
  const app = await buildRunsApp(t, { env })
  for (const key of ['', '   ', 'x'.repeat(256)]) {
    const res = await post(app, key, { prompt: 'hello' })
    t.equal(res.statusCode, 400, JSON.stringify(key.slice(0, 10)))
    t.equal(res.json().error, 'invalid_idempotency_key')
  }
  t.equal((await post(app, 'x'.repeat(255), { prompt: 'hello' })).statusCode, 201, '255 characters is fine')
  t.equal(await countRuns(app), 1)
})

t.test('failures before the handler use nothing up; handler 4xx are stored', async (t) => {
  const app = await buildRunsApp(t, { env })
  const bad = await post(app, 'k', { prompt: 'hello', origin: 'web' })
  t.equal(bad.statusCode, 400)
  t.equal((await app.db.select().from(idempotencyKeys)).length, 0, 'a validation failure stores nothing')
  const good = await post(app, 'k', { prompt: 'hello' })
  t.equal(good.statusCode, 201, 'a corrected retry with the same key runs')

  const root = newId()
  const missing = await post(app, 'k404', { prompt: 'x', rootRunId: root })
  t.equal(missing.statusCode, 404)
  const replay = await post(app, 'k404', { prompt: 'x', rootRunId: root })
  t.equal(replay.statusCode, 404)
  t.equal(replay.headers['idempotent-replayed'], 'true')
  t.equal(replay.payload, missing.payload)
  t.equal(await countRuns(app), 1)
})

t.test('in flight: 409 with Retry-After; a crashed lock expires after 60 s', async (t) => {
  const app = await buildRunsApp(t, { env })
  const orgId = '00000000-0000-7000-8000-00000000d001'
  // the row a first request leaves while working (or after crashing mid-way)
  await app.db.insert(idempotencyKeys).values({
    orgId,
    route: 'POST /api/runs',
    key: 'busy',
    fingerprint: fingerprintOf(
      'POST /api/runs',
      { kind: 'dev', orgId, userId: DEV_USER.id, role: 'owner' },
      { prompt: 'hello' }
    ),
    state: 'in_flight',
    lockToken: 'x',
    lockedUntil: new Date(Date.now() + 60_000),
    expiresAt: new Date(Date.now() + 86_400_000)
  })
  const busy = await post(app, 'busy', { prompt: 'hello' })
  t.equal(busy.statusCode, 409)
  t.equal(busy.json().error, 'idempotency_key_in_use')
  t.equal(busy.headers['retry-after'], '1')
  t.equal(await countRuns(app), 0)

  // 61 s later the lock has expired: the retry runs
  await app.db
    .update(idempotencyKeys)
    .set({ lockedUntil: new Date(Date.now() - 1000) })
    .where(and(eq(idempotencyKeys.orgId, orgId), eq(idempotencyKeys.key, 'busy')))
  const retry = await post(app, 'busy', { prompt: 'hello' })
  t.equal(retry.statusCode, 201)
  t.equal(await countRuns(app), 1)
  const replay = await post(app, 'busy', { prompt: 'hello' })
  t.equal(replay.headers['idempotent-replayed'], 'true')

  // past retention a key is free again
  await app.db.update(idempotencyKeys).set({ expiresAt: new Date(Date.now() - 1000) })
  const later = await post(app, 'busy', { prompt: 'other body' })
  t.equal(later.statusCode, 201)
  t.equal(await countRuns(app), 2)
})

t.test('the plugin prunes its own table: keys past retention go, live ones stay', async (t) => {
  const app = await buildRunsApp(t, { env })
  t.equal((await post(app, 'live', { prompt: 'hello' })).statusCode, 201)
  t.equal((await post(app, 'old', { prompt: 'hello' })).statusCode, 201)
  await app.db
    .update(idempotencyKeys)
    .set({ expiresAt: new Date(Date.now() - 1000) })
    .where(eq(idempotencyKeys.key, 'old'))
  t.equal(await pruneIdempotencyKeys(app.db), 1, 'one expired key deleted')
  t.same(
    (await app.db.select({ key: idempotencyKeys.key }).from(idempotencyKeys)).map((r) => r.key),
    ['live']
  )
  t.equal(await countRuns(app), 2, 'the runs stay')
})

t.test('20 identical requests racing create exactly one run', async (t) => {
  const app = await buildRunsApp(t, { env })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address() as { port: number }
  const answers = await Promise.all(
    Array.from({ length: 20 }, () =>
      fetch(`http://127.0.0.1:${address.port}/api/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'race' },
        body: JSON.stringify({ prompt: 'once' })
      }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), body: await r.text() }))
    )
  )
  const created = answers.filter((a) => a.status === 201)
  t.ok(created.length >= 1)
  t.ok(
    answers.every(
      (a) => a.status === 201 || (a.status === 409 && JSON.parse(a.body).error === 'idempotency_key_in_use')
    ),
    'only 201 or in_use'
  )
  t.equal(new Set(created.map((a) => a.body)).size, 1, 'every 201 is the same answer')
  t.equal(created.filter((a) => a.replayed !== 'true').length, 1, 'one original, the rest replays')
  t.equal(await countRuns(app), 1)
})

t.test('racing duplicates that join a thread add exactly one run; the losers roll back their work', async (t) => {
  const app = await buildRunsApp(t, { env })
  const root = (await post(app, undefined, { prompt: 'thread' })).json().run.id as string
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address() as { port: number }
  const answers = await Promise.all(
    Array.from({ length: 12 }, () =>
      fetch(`http://127.0.0.1:${address.port}/api/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'join-race' },
        body: JSON.stringify({ prompt: 'follow-up', rootRunId: root })
      }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), body: await r.text() }))
    )
  )
  t.ok(
    answers.every(
      (a) => a.status === 201 || (a.status === 409 && JSON.parse(a.body).error === 'idempotency_key_in_use')
    ),
    'only 201 or in_use'
  )
  t.equal(answers.filter((a) => a.status === 201 && a.replayed !== 'true').length, 1, 'one original')
  t.equal(await countRuns(app), 2, 'the thread root and one follow-up')
  const keys = await app.db.select().from(idempotencyKeys)
  t.same(
    keys.map((k) => [k.key, k.state]),
    [['join-race', 'done']],
    'one key, stored with the work'
  )
})

t.test('a retry is answered from the stored row even when the handler would now fail', async (t) => {
  const app = await buildRunsApp(t, { env })
  const orgId = '00000000-0000-7000-8000-00000000d001'
  const body = { prompt: 'hello', engine: 'openai' }
  const stored = '{"run":{"id":"from-before"}}'
  // answered 201 by an earlier deployment whose openai engine was configured
  await app.db.insert(idempotencyKeys).values({
    orgId,
    route: 'POST /api/runs',
    key: 'kept',
    state: 'done',
    responseStatus: 201,
    responseType: 'application/json',
    responseBody: stored,
    fingerprint: fingerprintOf('POST /api/runs', { kind: 'dev', orgId, userId: DEV_USER.id, role: 'owner' }, body),
    expiresAt: new Date(Date.now() + 86_400_000)
  })
  const retry = await post(app, 'kept', body)
  t.equal(retry.statusCode, 201, 'not the 400 engine_unavailable a new key gets')
  t.equal(retry.headers['idempotent-replayed'], 'true')
  t.equal(retry.payload, stored)
  const fresh = await post(app, 'fresh', body)
  t.equal(fresh.statusCode, 400)
  t.equal(fresh.json().error, 'engine_unavailable')
  t.equal(await countRuns(app), 0)
})

t.test('a 5xx stores nothing: the same key runs once the fault is gone', async (t) => {
  const app = await buildRunsApp(t, { env })
  await app.db.execute(sql`alter table runs rename to runs_away`)
  const failed = await post(app, 'k5', { prompt: 'hello' })
  t.equal(failed.statusCode, 500)
  t.equal(failed.json().error, 'internal_error')
  t.equal((await app.db.select().from(idempotencyKeys)).length, 0, 'no key stored')
  await app.db.execute(sql`alter table runs_away rename to runs`)
  const retry = await post(app, 'k5', { prompt: 'hello' })
  t.equal(retry.statusCode, 201)
  t.notOk(retry.headers['idempotent-replayed'])
  t.equal(await countRuns(app), 1)
})

t.test('keys are scoped by org', async (t) => {
  const app = await buildRunsApp(t, { env })
  const other = { id: newId(), name: 'Other', slug: 'other' }
  await app.db.insert(organizations).values(other)
  await app.db.insert(idempotencyKeys).values({
    orgId: other.id,
    route: 'POST /api/runs',
    key: 'shared',
    fingerprint: 'theirs',
    state: 'done',
    responseStatus: 201,
    responseType: 'application/json',
    responseBody: '{"run":"theirs"}',
    expiresAt: new Date(Date.now() + 86_400_000)
  })
  const res = await post(app, 'shared', { prompt: 'mine' })
  t.equal(res.statusCode, 201)
  t.notOk(res.headers['idempotent-replayed'])
  t.equal(res.json().run.prompt, 'mine', "another org's answer is never replayed")
})
