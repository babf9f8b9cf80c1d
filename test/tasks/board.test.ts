import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { buildGroupApp } from '../group-app.js'
import { addMember, mintKey, signUp, signUpWithOrg, type Teardown } from '../helper.js'
import tasksRoutes from '../../src/tasks/index.js'
import tasksService from '../../src/tasks/service.js'

/** The tasks group alone (its runs, which need the runs group, are in task-runs.test.ts). */
const buildTasksApp = (t: Teardown) =>
  buildGroupApp(t, {
    services: async (app) => {
      await app.register(tasksService)
    },
    routes: [tasksRoutes]
  })

type App = Awaited<ReturnType<typeof buildTasksApp>>
interface Task {
  id: string
  title: string
  status: string
  position: string
  revision: number
  projectId: string | null
  runId: string | null
}

const TASK_KEYS = [
  'assigneeId',
  'createdAt',
  'createdBy',
  'description',
  'id',
  'position',
  'projectId',
  'revision',
  'runId',
  'status',
  'title',
  'updatedAt'
]
const STATUSES = ['todo', 'doing', 'done'] as const

/** Every task of a project, page by page (a small limit, so paging is exercised too). */
async function board(app: App, headers: Record<string, string>, projectId: string): Promise<Task[]> {
  const out: Task[] = []
  let cursor: string | null = null
  do {
    const res = await app.inject({
      method: 'GET',
      url: `/api/tasks?projectId=${projectId}&limit=7${cursor ? `&cursor=${cursor}` : ''}`,
      headers
    })
    const page = res.json() as { items: Task[]; nextCursor: string | null }
    out.push(...page.items)
    cursor = page.nextCursor
  } while (cursor)
  return out
}

t.test('projects: CRUD, archive and restore, a filter, deleting takes its tasks', async (t) => {
  const app = await buildTasksApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const created = await app.inject({ method: 'POST', url: '/api/projects', headers, payload: { name: 'Launch' } })
  t.equal(created.statusCode, 201)
  const p = created.json().project
  t.same(Object.keys(p).sort(), ['archivedAt', 'createdAt', 'createdBy', 'description', 'id', 'name', 'updatedAt'])
  t.match(p, { name: 'Launch', description: '', archivedAt: null, createdBy: owner.user.id })
  const other = (
    await app.inject({ method: 'POST', url: '/api/projects', headers, payload: { name: 'Other', description: 'd' } })
  ).json().project

  const archived = await app.inject({
    method: 'PATCH',
    url: `/api/projects/${p.id}`,
    headers,
    payload: { archived: true }
  })
  t.equal(archived.statusCode, 200)
  t.type(archived.json().project.archivedAt, 'string')
  const list = async (q: string) =>
    (await app.inject({ method: 'GET', url: `/api/projects${q}`, headers }))
      .json()
      .items.map((x: { id: string }) => x.id)
  t.same(await list(''), [other.id, p.id])
  t.same(await list('?archived=true'), [p.id])
  t.same(await list('?archived=false'), [other.id])
  const restored = await app.inject({
    method: 'PATCH',
    url: `/api/projects/${p.id}`,
    headers,
    payload: { archived: false, name: 'Launch 2' }
  })
  t.match(restored.json().project, { archivedAt: null, name: 'Launch 2' })

  const { authorization } = await mintKey(app, owner.cookie)
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/projects/${p.id}`, headers: { authorization } })).statusCode,
    200
  )
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/projects', headers: { authorization }, payload: { name: 'k' } }))
      .statusCode,
    401
  )

  await app.inject({ method: 'POST', url: '/api/tasks', headers, payload: { title: 'in launch', projectId: p.id } })
  t.equal((await app.inject({ method: 'DELETE', url: `/api/projects/${p.id}`, headers })).statusCode, 204)
  t.equal((await app.inject({ method: 'GET', url: `/api/projects/${p.id}`, headers })).statusCode, 404)
  t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from tasks`)), [{ n: 0 }])
})

t.test(
  'tasks: created last in their column, edited by revision, moved above, below, between and to the end',
  async (t) => {
    const app = await buildTasksApp(t)
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    const project = (
      await app.inject({ method: 'POST', url: '/api/projects', headers, payload: { name: 'Board' } })
    ).json().project
    const make = async (title: string, status?: string) =>
      (
        await app.inject({
          method: 'POST',
          url: '/api/tasks',
          headers,
          payload: { title, projectId: project.id, ...(status ? { status } : {}) }
        })
      ).json().task as Task
    const a = await make('a')
    t.same(Object.keys(a).sort(), TASK_KEYS)
    t.match(a, { status: 'todo', revision: 1, projectId: project.id, runId: null, assigneeId: null, description: '' })
    const b = await make('b')
    const c = await make('c')
    const d = await make('d', 'doing')
    const titles = async () => (await board(app, headers, project.id)).map((x) => `${x.status}:${x.title}`)
    t.same(await titles(), ['todo:a', 'todo:b', 'todo:c', 'doing:d'])

    const move = (task: Task, body: Record<string, unknown>) =>
      app.inject({ method: 'POST', url: `/api/tasks/${task.id}/move`, headers, payload: body })
    const current = async (task: Task) =>
      (await app.inject({ method: 'GET', url: `/api/tasks/${task.id}`, headers })).json().task as Task
    let res = await move(c, { status: 'todo', before: a.id, revision: 1 })
    t.equal(res.statusCode, 200)
    t.equal(res.json().task.revision, 2)
    t.same(await titles(), ['todo:c', 'todo:a', 'todo:b', 'doing:d'])
    res = await move(await current(c), { status: 'doing', after: d.id, revision: 2 })
    t.same(await titles(), ['todo:a', 'todo:b', 'doing:d', 'doing:c'])
    res = await move(await current(a), { status: 'doing', after: d.id, before: c.id, revision: 1 })
    t.equal(res.statusCode, 200)
    t.same(await titles(), ['todo:b', 'doing:d', 'doing:a', 'doing:c'])
    res = await move(await current(d), { status: 'doing', revision: 1 })
    t.same(await titles(), ['todo:b', 'doing:a', 'doing:c', 'doing:d'], 'neither: last')

    // refusals change nothing
    const before = await titles()
    t.equal(
      (await move(await current(b), { status: 'doing', before: b.id, revision: 1 })).statusCode,
      400,
      'next to itself'
    )
    t.equal(
      (await move(await current(b), { status: 'todo', before: c.id, revision: 1 })).statusCode,
      409,
      'an anchor in another column'
    )
    t.equal(
      (await move(await current(b), { status: 'doing', after: d.id, before: a.id, revision: 1 })).statusCode,
      409,
      'not neighbours'
    )
    t.equal(
      (await move(await current(b), { status: 'doing', before: '0190b8f0-0000-7000-8000-000000000000', revision: 1 }))
        .statusCode,
      404
    )
    t.equal((await move(await current(b), { status: 'doing', revision: 7 })).statusCode, 409, 'stale revision')
    t.equal((await move(await current(b), { status: 'nope', revision: 1 })).statusCode, 400)
    t.same(await titles(), before)

    // PATCH by revision; a new status puts the task last there
    const patched = await app.inject({
      method: 'PATCH',
      url: `/api/tasks/${b.id}`,
      headers,
      payload: { title: 'b2', status: 'doing', revision: 1 }
    })
    t.equal(patched.statusCode, 200)
    t.same(await titles(), ['doing:a', 'doing:c', 'doing:d', 'doing:b2'])
    t.equal(
      (await app.inject({ method: 'PATCH', url: `/api/tasks/${b.id}`, headers, payload: { title: 'b3', revision: 1 } }))
        .statusCode,
      409
    )
    const member = await signUp(app)
    await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
    const stranger = await signUp(app)
    t.equal(
      (
        await app.inject({
          method: 'PATCH',
          url: `/api/tasks/${b.id}`,
          headers,
          payload: { assigneeId: member.user.id, revision: 2 }
        })
      ).json().task.assigneeId,
      member.user.id
    )
    t.equal(
      (
        await app.inject({
          method: 'PATCH',
          url: `/api/tasks/${b.id}`,
          headers,
          payload: { assigneeId: stranger.user.id, revision: 3 }
        })
      ).statusCode,
      404,
      'not a member'
    )

    // filters and the key
    const { authorization } = await mintKey(app, owner.cookie)
    const doing = (
      await app.inject({
        method: 'GET',
        url: `/api/tasks?projectId=${project.id}&status=doing`,
        headers: { authorization }
      })
    ).json().items
    t.equal(doing.length, 4)
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: `/api/tasks/${b.id}/move`,
          headers: { authorization },
          payload: { status: 'todo', revision: 3 }
        })
      ).statusCode,
      401
    )
    t.equal((await app.inject({ method: 'DELETE', url: `/api/tasks/${b.id}`, headers })).statusCode, 204)
    t.equal((await app.inject({ method: 'DELETE', url: `/api/tasks/${b.id}`, headers })).statusCode, 404)
  }
)

t.test('two moves with one revision: one 200, one 409', async (t) => {
  const app = await buildTasksApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const task = (await app.inject({ method: 'POST', url: '/api/tasks', headers, payload: { title: 'raced' } })).json()
    .task
  const results = await Promise.all(
    ['doing', 'done'].map((status) =>
      app.inject({ method: 'POST', url: `/api/tasks/${task.id}/move`, headers, payload: { status, revision: 1 } })
    )
  )
  t.same(results.map((r) => r.statusCode).sort(), [200, 409])
  const stored = (await app.inject({ method: 'GET', url: `/api/tasks/${task.id}`, headers })).json().task
  t.equal(stored.revision, 2)
  t.equal(stored.status, results.find((r) => r.statusCode === 200)!.json().task.status)
})

t.test('property: 200 random moves keep one total order, equal to a model; each writes one row', async (t) => {
  const app = await buildTasksApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const project = (
    await app.inject({ method: 'POST', url: '/api/projects', headers, payload: { name: 'Property' } })
  ).json().project
  // a seeded generator, so a failure can be replayed
  let seed = 20261123
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    return seed % n
  }
  const model: Record<string, string[]> = { todo: [], doing: [], done: [] }
  const revisions = new Map<string, number>()
  for (let i = 0; i < 24; i++) {
    const status = STATUSES[i % 3]!
    const task = (
      await app.inject({
        method: 'POST',
        url: '/api/tasks',
        headers,
        payload: { title: `t${i}`, status, projectId: project.id }
      })
    ).json().task
    model[status]!.push(task.id)
    revisions.set(task.id, 1)
  }
  for (let step = 0; step < 200; step++) {
    const all = Object.values(model).flat()
    const id = all[random(all.length)]!
    const status = STATUSES[random(3)]!
    for (const column of Object.values(model)) if (column.includes(id)) column.splice(column.indexOf(id), 1)
    const column = model[status]!
    const how = column.length === 0 ? 2 : random(4)
    const at = random(column.length + 1)
    let body: Record<string, unknown>
    if (how === 0 && at < column.length) {
      body = { before: column[at] }
      column.splice(at, 0, id)
    } else if (how === 1 && at > 0) {
      body = { after: column[at - 1] }
      column.splice(at, 0, id)
    } else if (how === 3 && at > 0 && at < column.length) {
      body = { after: column[at - 1], before: column[at] }
      column.splice(at, 0, id)
    } else {
      body = {}
      column.push(id)
    }
    const updatedBefore = rowsOf<{ id: string; updated_at: unknown }>(
      await app.db.execute(sql`select id, updated_at from tasks order by id`)
    )
    const res = await app.inject({
      method: 'POST',
      url: `/api/tasks/${id}/move`,
      headers,
      payload: { status, revision: revisions.get(id), ...body }
    })
    if (res.statusCode !== 200) {
      t.fail(`move ${step}: ${res.statusCode} ${res.body}`)
      break
    }
    revisions.set(id, res.json().task.revision)
    const updatedAfter = rowsOf<{ id: string; updated_at: unknown }>(
      await app.db.execute(sql`select id, updated_at from tasks order by id`)
    )
    const changed = updatedAfter
      .filter((row, i) => String(row.updated_at) !== String(updatedBefore[i]!.updated_at))
      .map((row) => row.id)
    if (changed.length !== 1 || changed[0] !== id) {
      t.fail(`move ${step} wrote ${changed.length} rows`)
      break
    }
  }
  const stored = await board(app, headers, project.id)
  t.same(
    stored.map((x) => x.id),
    [...model.todo!, ...model.doing!, ...model.done!],
    'the board is the model'
  )
  for (const status of STATUSES) {
    const positions = stored.filter((x) => x.status === status).map((x) => x.position)
    t.ok(
      positions.every((p, i) => i === 0 || positions[i - 1]! < p),
      `${status}: strictly increasing positions`
    )
  }
})
