import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { mintKey, signUpWithOrg } from '../helper.js'
import { buildKnowledgeApp } from './group.js'

type App = Awaited<ReturnType<typeof buildKnowledgeApp>>

const create = (app: App, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/api/knowledge', payload, headers })
const patch = (app: App, id: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.inject({ method: 'PATCH', url: `/api/knowledge/${id}`, payload, headers })

const RECORD_KEYS = ['body', 'createdAt', 'createdBy', 'id', 'source', 'tags', 'title', 'updatedAt', 'version']

t.test('records: create, read, update with version, history, delete', async (t) => {
  const app = await buildKnowledgeApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }

  const res = await create(
    app,
    { title: 'Deploying', body: '# Deploy\n\nRun `make deploy`.', tags: ['ops', 'deploy', 'ops'] },
    headers
  )
  t.equal(res.statusCode, 201)
  const record = res.json().record
  t.same(Object.keys(record).sort(), RECORD_KEYS)
  t.match(record, {
    title: 'Deploying',
    tags: ['ops', 'deploy'],
    source: { kind: 'manual' },
    version: 1,
    createdBy: owner.user.id
  })
  t.equal(record.createdAt, record.updatedAt)

  const read = await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}`, headers })
  t.equal(read.statusCode, 200)
  t.same(read.json().record, record)

  const updated = await patch(app, record.id, { body: 'Run `make ship`.', version: 1 }, headers)
  t.equal(updated.statusCode, 200)
  t.match(updated.json().record, { title: 'Deploying', body: 'Run `make ship`.', version: 2, tags: ['ops', 'deploy'] })

  // a stale version changes nothing
  const stale = await patch(app, record.id, { title: 'Lost update', version: 1 }, headers)
  t.equal(stale.statusCode, 409)
  t.equal(stale.json().error, 'conflict')
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}`, headers })).json().record.title,
    'Deploying'
  )

  const retagged = await patch(app, record.id, { tags: [], title: 'Shipping', version: 2 }, headers)
  t.match(retagged.json().record, { title: 'Shipping', tags: [], version: 3 })

  const history = await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}/history`, headers })
  t.equal(history.statusCode, 200)
  t.match(history.json().history, [
    {
      version: 1,
      title: 'Deploying',
      body: '# Deploy\n\nRun `make deploy`.',
      kind: 'created',
      changedBy: owner.user.id
    },
    { version: 2, title: 'Deploying', body: 'Run `make ship`.', kind: 'updated' },
    { version: 3, title: 'Shipping', kind: 'updated' }
  ])
  t.equal(history.json().history.length, 3)

  const deleted = await app.inject({ method: 'DELETE', url: `/api/knowledge/${record.id}`, headers })
  t.equal(deleted.statusCode, 204)
  t.equal(deleted.body, '')
  t.equal((await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}`, headers })).statusCode, 404)
  t.equal((await app.inject({ method: 'DELETE', url: `/api/knowledge/${record.id}`, headers })).statusCode, 404)
  t.equal((await patch(app, record.id, { title: 'x', version: 3 }, headers)).statusCode, 404)
  // the history outlives the record and says it was deleted
  const after = (await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}/history`, headers })).json()
    .history
  t.match(after[after.length - 1], { kind: 'deleted', version: 3, title: 'Shipping', changedBy: owner.user.id })
  t.equal((await app.inject({ method: 'GET', url: '/api/knowledge/nope/history', headers })).statusCode, 404)
})

t.test('records: bad input is a 400 that changes nothing', async (t) => {
  const app = await buildKnowledgeApp(t)
  const bad: Array<Record<string, unknown>> = [
    {},
    { title: '', body: 'x' },
    { title: '   ', body: 'x' },
    { title: 'x' },
    { title: 'x', body: 'y', tags: 'ops' },
    { title: 'x', body: 'y', tags: [''] },
    { title: 'x', body: 'y', tags: [' padded '] },
    { title: 'x', body: 'y', version: 3 },
    { title: 'x', body: 'y', extra: true }
  ]
  for (const payload of bad) {
    const res = await create(app, payload)
    t.equal(res.statusCode, 400, JSON.stringify(payload))
    t.equal(res.json().error, 'validation_failed')
  }
  const { id } = (await create(app, { title: 'ok', body: 'ok' })).json().record
  t.equal((await patch(app, id, { title: 'no version' })).statusCode, 400)
  t.equal((await patch(app, id, { title: 'x', version: 0 })).statusCode, 400)
  t.equal((await patch(app, id, { version: 1, createdBy: 'me' })).statusCode, 400)
  const rows = rowsOf(await app.db.execute(sql`select count(*)::int as n from knowledge_records`))
  t.same(rows, [{ n: 1 }])
})

t.test('records: lists page newest first and filter on a tag; keys read but never write', async (t) => {
  const app = await buildKnowledgeApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const ids: string[] = []
  for (let i = 0; i < 5; i++)
    ids.push(
      (await create(app, { title: `r${i}`, body: 'b', tags: i % 2 === 0 ? ['even'] : ['odd'] }, headers)).json().record
        .id
    )
  const first = (await app.inject({ method: 'GET', url: '/api/knowledge?limit=2', headers })).json()
  t.same(
    first.items.map((r: { id: string }) => r.id),
    [ids[4], ids[3]]
  )
  t.type(first.nextCursor, 'string')
  const second = (
    await app.inject({ method: 'GET', url: `/api/knowledge?limit=2&cursor=${first.nextCursor}`, headers })
  ).json()
  t.same(
    second.items.map((r: { id: string }) => r.id),
    [ids[2], ids[1]]
  )
  const even = (await app.inject({ method: 'GET', url: '/api/knowledge?tag=even', headers })).json()
  t.same(
    even.items.map((r: { title: string }) => r.title),
    ['r4', 'r2', 'r0']
  )
  t.equal(even.nextCursor, null)

  const key = await mintKey(app, owner.cookie)
  const auth = { authorization: key.authorization }
  t.equal((await app.inject({ method: 'GET', url: '/api/knowledge', headers: auth })).json().items.length, 5)
  t.equal((await app.inject({ method: 'GET', url: `/api/knowledge/${ids[0]}`, headers: auth })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/api/knowledge/search?q=r1', headers: auth })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: `/api/knowledge/${ids[0]}/history`, headers: auth })).statusCode, 401)
  t.equal((await create(app, { title: 'by key', body: 'b' }, auth)).statusCode, 401)
  t.equal((await patch(app, ids[0]!, { title: 'by key', version: 1 }, auth)).statusCode, 401)
  const made = (await create(app, { title: 'key-less', body: 'b' })).json().record
  t.equal(made.createdBy, null, 'the dev org makes records with createdBy null')
})

t.test('records: concurrent updates with one version: exactly one wins', async (t) => {
  const app = await buildKnowledgeApp(t)
  const { id } = (await create(app, { title: 'race', body: 'start' })).json().record
  const results = await Promise.all(
    Array.from({ length: 8 }, (_, i) => patch(app, id, { body: `writer ${i}`, version: 1 }))
  )
  t.same(results.map((r) => r.statusCode).sort(), [200, 409, 409, 409, 409, 409, 409, 409])
  const history = (await app.inject({ method: 'GET', url: `/api/knowledge/${id}/history` })).json().history
  t.equal(history.length, 2)
})
