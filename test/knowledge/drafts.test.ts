import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { learnedDrafts } from '../../src/runs/engines/echo.js'
import { buildTestApp, signUpWithOrg, waitFor } from '../helper.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

const DRAFT_KEYS = [
  'body',
  'createdAt',
  'createdBy',
  'decidedAt',
  'decidedBy',
  'id',
  'runId',
  'state',
  'tags',
  'targetRecordId',
  'title'
]

const draft = (app: App, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/api/knowledge/drafts', payload, headers })
const decide = (
  app: App,
  id: string,
  how: 'approve' | 'reject',
  headers: Record<string, string> = {},
  payload?: Record<string, unknown>
) => app.inject({ method: 'POST', url: `/api/knowledge/drafts/${id}/${how}`, headers, ...(payload ? { payload } : {}) })

t.test("drafts: approved into a new record, with the approver's edits", async (t) => {
  const app = await buildTestApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const res = await draft(
    app,
    { title: 'On-call', body: 'Page the secondary after 10 minutes.', tags: ['ops'] },
    headers
  )
  t.equal(res.statusCode, 201)
  const d = res.json().draft
  t.same(Object.keys(d).sort(), DRAFT_KEYS)
  t.match(d, {
    state: 'open',
    runId: null,
    targetRecordId: null,
    createdBy: owner.user.id,
    decidedAt: null,
    decidedBy: null,
    tags: ['ops']
  })

  const approved = await decide(app, d.id, 'approve', headers, { title: 'On-call escalation' })
  t.equal(approved.statusCode, 200)
  const { draft: decided, record } = approved.json()
  t.match(decided, { id: d.id, state: 'approved', decidedBy: owner.user.id })
  t.type(decided.decidedAt, 'string')
  t.match(record, {
    title: 'On-call escalation',
    body: 'Page the secondary after 10 minutes.',
    tags: ['ops'],
    version: 1,
    source: { kind: 'draft', draftId: d.id, runId: null }
  })
  t.equal((await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}`, headers })).statusCode, 200)

  // decided once: both decisions now conflict and change nothing
  t.equal((await decide(app, d.id, 'approve', headers)).statusCode, 409)
  t.equal((await decide(app, d.id, 'reject', headers)).statusCode, 409)
  t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from knowledge_records`)), [{ n: 1 }])
  const listed = (await app.inject({ method: 'GET', url: '/api/knowledge/drafts', headers })).json().items
  t.match(listed, [{ id: d.id, state: 'approved' }])
})

t.test('drafts: a draft that revises a record makes its next version; a deleted target is a 409', async (t) => {
  const app = await buildTestApp(t)
  const { record } = (
    await app.inject({ method: 'POST', url: '/api/knowledge', payload: { title: 'VPN', body: 'Use the old client.' } })
  ).json()
  const d = (await draft(app, { title: 'VPN', body: 'Use the new client.', targetRecordId: record.id })).json().draft
  t.equal(d.targetRecordId, record.id)
  const approved = (await decide(app, d.id, 'approve')).json()
  t.match(approved.record, { id: record.id, version: 2, body: 'Use the new client.', source: { kind: 'manual' } })
  const history = (await app.inject({ method: 'GET', url: `/api/knowledge/${record.id}/history` })).json().history
  t.same(
    history.map((h: { kind: string }) => h.kind),
    ['created', 'updated']
  )

  const orphan = (await draft(app, { title: 'VPN', body: 'again', targetRecordId: record.id })).json().draft
  t.equal((await app.inject({ method: 'DELETE', url: `/api/knowledge/${record.id}` })).statusCode, 204)
  const refused = await decide(app, orphan.id, 'approve')
  t.equal(refused.statusCode, 409)
  const stillOpen = (await app.inject({ method: 'GET', url: '/api/knowledge/drafts?state=open' })).json().items
  t.match(stillOpen, [{ id: orphan.id }], 'still open: it can be rejected')
  t.equal((await decide(app, orphan.id, 'reject')).json().draft.state, 'rejected')

  t.equal((await draft(app, { title: 'x', body: 'y', targetRecordId: 'nope' })).statusCode, 404)
  t.equal((await decide(app, 'nope', 'approve')).statusCode, 404)
  t.equal((await decide(app, 'nope', 'reject')).statusCode, 404)
})

t.test('drafts: list by state, newest first', async (t) => {
  const app = await buildTestApp(t)
  const ids: string[] = []
  for (let i = 0; i < 3; i++) ids.push((await draft(app, { title: `d${i}`, body: 'b' })).json().draft.id)
  await decide(app, ids[1]!, 'reject')
  const open = (await app.inject({ method: 'GET', url: '/api/knowledge/drafts?state=open' })).json()
  t.same(
    open.items.map((d: { id: string }) => d.id),
    [ids[2], ids[0]]
  )
  const rejected = (await app.inject({ method: 'GET', url: '/api/knowledge/drafts?state=rejected' })).json()
  t.same(
    rejected.items.map((d: { id: string }) => d.id),
    [ids[1]]
  )
  t.equal((await app.inject({ method: 'GET', url: '/api/knowledge/drafts?state=maybe' })).statusCode, 400)
})

t.test('the echo engine proposes one draft per learn: line, made by the run', async (t) => {
  t.same(learnedDrafts('hello\nlearn: Deploys freeze on Fridays.\n  LEARN:  second  \nnot learn: this\nlearn:'), [
    { title: 'Deploys freeze on Fridays.', body: 'Deploys freeze on Fridays.' },
    { title: 'second', body: 'second' }
  ])
  const long = `learn: ${'word '.repeat(40).trim()}`
  t.equal(learnedDrafts(long)[0]!.title.length, 80)

  const app = await buildTestApp(t, { env: { RUN_POLL_MS: '20' } })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const prompt = 'Some chat.\nlearn: The staging database is refreshed every Monday.\nlearn: Builds use Node 20.'
  const { run } = (await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt } })).json()
  await waitFor('the run to finish', async () => {
    const r = (await app.inject({ method: 'GET', url: `/api/runs/${run.id}`, headers })).json().run
    return r.status === 'succeeded' ? r : null
  })
  const drafts = (await app.inject({ method: 'GET', url: '/api/knowledge/drafts', headers })).json().items
  t.match(drafts, [
    { title: 'Builds use Node 20.', body: 'Builds use Node 20.', runId: run.id, createdBy: null, state: 'open' },
    { title: 'The staging database is refreshed every Monday.', runId: run.id, createdBy: null, state: 'open' }
  ])
  const approved = (await decide(app, drafts[1].id, 'approve', headers)).json()
  t.match(approved.record.source, { kind: 'draft', draftId: drafts[1].id, runId: run.id })
})
