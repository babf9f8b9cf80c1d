import { and, eq, sql, type SQL } from 'drizzle-orm'
import { generateKeyBetween } from 'fractional-indexing'
import { TASK_STATUSES } from '../../schemas/tasks.js'
import { members } from '../auth/tables.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { decodeCursorParts, pageOf } from '../db/paging.js'
import { dateOf, isoOf } from '../db/rows.js'
import type { FinishedRun, FollowUpRun } from '../runs/skills-port.js'
import { projects, tasks, type TaskStatus } from './tables.js'

export type TaskRow = typeof tasks.$inferSelect

export function taskToWire(t: TaskRow) {
  return {
    id: t.id, title: t.title, description: t.description, status: t.status, position: t.position, projectId: t.projectId,
    runId: t.runId, assigneeId: t.assigneeId, revision: t.revision, createdAt: isoOf(t.createdAt), updatedAt: isoOf(t.updatedAt),
    createdBy: t.createdBy
  }
}

/** A column of the board: tasks of one project (or of none) in one status. */
interface Column {
  orgId: string
  projectId: string | null
  status: TaskStatus
}

const inColumn = (c: Column): SQL =>
  sql`org_id = ${c.orgId} and coalesce(project_id, '') = ${c.projectId ?? ''} and status = ${c.status}`

/**
 * Serializes the writers of one column (two tasks appended at once must not get one key).
 * Taken after the moved task's row lock, always in that order, so writers cannot deadlock.
 */
async function lockColumn(tx: Tx, c: Column): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`cairn.tasks:${c.orgId}:${c.projectId ?? ''}:${c.status}`}))`)
}

/** The position after the column's last task (the moved task itself left out). */
async function endOf(tx: Tx, c: Column, except: string | null): Promise<string> {
  const [last] = rowsOf<{ position: string }>(await tx.execute(sql`
    select position from tasks where ${inColumn(c)} ${except ? sql`and id <> ${except}` : sql``}
    order by position desc limit 1`))
  return generateKeyBetween(last?.position ?? null, null)
}

/** The task directly above (`desc`) or below (`asc`) a position in a column, the moved task left out. */
async function neighbour(tx: Tx, c: Column, position: string, direction: 'above' | 'below', except: string): Promise<string | null> {
  const [row] = rowsOf<{ position: string }>(await tx.execute(direction === 'above'
    ? sql`select position from tasks where ${inColumn(c)} and id <> ${except} and position < ${position} order by position desc limit 1`
    : sql`select position from tasks where ${inColumn(c)} and id <> ${except} and position > ${position} order by position asc limit 1`))
  return row?.position ?? null
}

export type TaskRefusal =
  | { refused: 'missing' }
  | { refused: 'stale'; current: number }
  | { refused: 'no_project' }
  | { refused: 'no_assignee' }
  | { refused: 'no_anchor'; field: 'before' | 'after' }
  | { refused: 'anchor_elsewhere'; field: 'before' | 'after' }
  | { refused: 'anchor_is_self' }
  | { refused: 'not_neighbours' }

class Refused extends Error {
  readonly refusal: TaskRefusal
  constructor(refusal: TaskRefusal) {
    super(refusal.refused)
    this.refusal = refusal
  }
}

async function refusing<T>(work: () => Promise<T>): Promise<T | TaskRefusal> {
  try {
    return await work()
  } catch (err) {
    if (err instanceof Refused) return err.refusal
    throw err
  }
}

async function checkProject(tx: Tx, orgId: string, projectId: string | null): Promise<void> {
  if (projectId === null) return
  const [row] = await tx.select({ id: projects.id }).from(projects).where(and(eq(projects.orgId, orgId), eq(projects.id, projectId))).for('share')
  if (!row) throw new Refused({ refused: 'no_project' })
}

async function checkAssignee(tx: Tx, orgId: string, userId: string | null): Promise<void> {
  if (userId === null) return
  const [row] = await tx.select({ userId: members.userId }).from(members).where(and(eq(members.orgId, orgId), eq(members.userId, userId)))
  if (!row) throw new Refused({ refused: 'no_assignee' })
}

export interface NewTask {
  title: string
  description: string
  status: TaskStatus
  projectId: string | null
  assigneeId: string | null
  createdBy: string | null
}

/** A new task, last in its column. */
export async function createTask(db: Db, orgId: string, t: NewTask): Promise<TaskRow | TaskRefusal> {
  return refusing(() => db.transaction(async (tx) => {
    await checkProject(tx, orgId, t.projectId)
    await checkAssignee(tx, orgId, t.assigneeId)
    const column = { orgId, projectId: t.projectId, status: t.status }
    await lockColumn(tx, column)
    const [row] = await tx.insert(tasks).values({ id: newId(), orgId, ...t, position: await endOf(tx, column, null) }).returning()
    return row!
  }))
}

export async function getTask(db: Db | Tx, orgId: string, id: string): Promise<TaskRow | null> {
  const [row] = await db.select().from(tasks).where(and(eq(tasks.orgId, orgId), eq(tasks.id, id)))
  return row ?? null
}

/** The task, locked for this transaction, at the revision the caller read. */
async function lockTask(tx: Tx, orgId: string, id: string, revision: number | null): Promise<TaskRow> {
  const [row] = await tx.select().from(tasks).where(and(eq(tasks.orgId, orgId), eq(tasks.id, id))).for('update')
  if (!row) throw new Refused({ refused: 'missing' })
  if (revision !== null && row.revision !== revision) throw new Refused({ refused: 'stale', current: row.revision })
  return row
}

async function writeTask(tx: Tx, id: string, change: Partial<typeof tasks.$inferInsert>): Promise<TaskRow> {
  const [row] = await tx.update(tasks)
    .set({ ...change, revision: sql`${tasks.revision} + 1`, updatedAt: sql`now()` })
    .where(eq(tasks.id, id)).returning()
  return row!
}

export interface TaskChange {
  title?: string | undefined
  description?: string | undefined
  status?: TaskStatus | undefined
  projectId?: string | null | undefined
  assigneeId?: string | null | undefined
}

/** Edits a task at `revision`; a new status or project puts it last in its new column. */
export async function updateTask(db: Db, orgId: string, id: string, change: TaskChange, revision: number): Promise<TaskRow | TaskRefusal> {
  return refusing(() => db.transaction(async (tx) => {
    const task = await lockTask(tx, orgId, id, revision)
    if (change.projectId !== undefined) await checkProject(tx, orgId, change.projectId)
    if (change.assigneeId !== undefined) await checkAssignee(tx, orgId, change.assigneeId)
    const column = { orgId, projectId: change.projectId === undefined ? task.projectId : change.projectId, status: change.status ?? task.status }
    const moved = column.projectId !== task.projectId || column.status !== task.status
    if (moved) await lockColumn(tx, column)
    return writeTask(tx, id, { ...change, ...(moved ? { position: await endOf(tx, column, id) } : {}) })
  }))
}

export async function deleteTask(db: Db, orgId: string, id: string): Promise<boolean> {
  const rows = await db.delete(tasks).where(and(eq(tasks.orgId, orgId), eq(tasks.id, id))).returning({ id: tasks.id })
  return rows.length === 1
}

/**
 * Contract 9's move: into `status` (same project), directly above `before`, directly below
 * `after`, between both (which must be neighbours), or last. Writes the moved task only:
 * its new key lies between its new neighbours' keys.
 */
export async function moveTask(db: Db, orgId: string, id: string, to: { status: TaskStatus; before?: string | undefined; after?: string | undefined }, revision: number): Promise<TaskRow | TaskRefusal> {
  return refusing(() => db.transaction(async (tx) => {
    const task = await lockTask(tx, orgId, id, revision)
    const column = { orgId, projectId: task.projectId, status: to.status }
    await lockColumn(tx, column)
    const anchor = async (field: 'before' | 'after', anchorId: string) => {
      if (anchorId === id) throw new Refused({ refused: 'anchor_is_self' })
      const row = await getTask(tx, orgId, anchorId)
      if (!row) throw new Refused({ refused: 'no_anchor', field })
      if (row.status !== to.status || row.projectId !== task.projectId) throw new Refused({ refused: 'anchor_elsewhere', field })
      return row.position
    }
    let position: string
    if (to.before !== undefined && to.after !== undefined) {
      const upper = await anchor('before', to.before)
      const lower = await anchor('after', to.after)
      if (!(lower < upper) || (await neighbour(tx, column, lower, 'below', id)) !== upper) throw new Refused({ refused: 'not_neighbours' })
      position = generateKeyBetween(lower, upper)
    } else if (to.before !== undefined) {
      const upper = await anchor('before', to.before)
      position = generateKeyBetween(await neighbour(tx, column, upper, 'above', id), upper)
    } else if (to.after !== undefined) {
      const lower = await anchor('after', to.after)
      position = generateKeyBetween(lower, await neighbour(tx, column, lower, 'below', id))
    } else {
      position = await endOf(tx, column, id)
    }
    return writeTask(tx, id, { status: to.status, position })
  }))
}

/**
 * Starts work on a task in the transaction of its run: `doing` (last in that column unless
 * it is there already) with the run's id.
 */
export async function startTaskRun(tx: Tx, orgId: string, id: string, runId: string): Promise<TaskRow | null> {
  const task = await lockTask(tx, orgId, id, null).catch((err: unknown) => {
    if (err instanceof Refused) return null
    throw err
  })
  if (!task) return null
  const column = { orgId, projectId: task.projectId, status: 'doing' as const }
  let position = task.position
  if (task.status !== 'doing') {
    await lockColumn(tx, column)
    position = await endOf(tx, column, id)
  }
  return writeTask(tx, id, { status: 'doing', position, runId })
}

/**
 * In the transaction that finished a run: a task's run that succeeded moves the task to
 * `done` (last there), once, and only while the task still names that run.
 */
export async function finishTaskRun(tx: Tx, run: FinishedRun): Promise<FollowUpRun[]> {
  if (run.status !== 'succeeded' || typeof run.metadata.taskId !== 'string') return []
  const [task] = await tx.select().from(tasks)
    .where(and(eq(tasks.orgId, run.orgId), eq(tasks.id, run.metadata.taskId), eq(tasks.runId, run.id))).for('update')
  if (!task || task.status === 'done') return []
  const column = { orgId: run.orgId, projectId: task.projectId, status: 'done' as const }
  await lockColumn(tx, column)
  await writeTask(tx, task.id, { status: 'done', position: await endOf(tx, column, task.id) })
  return []
}

const RANK = sql.raw(`case status ${TASK_STATUSES.map((s, i) => `when '${s}' then ${i}`).join(' ')} end`)
const CURSOR_PARTS = [/^[0-9]$/, /^[0-9A-Za-z]{1,900}$/, /^[A-Za-z0-9_-]{1,64}$/] as const

/** Tasks by status (todo, doing, done), then position: the board read top to bottom, column by column. */
export async function listTasks(db: Db, orgId: string, q: { projectId?: string | undefined; status?: TaskStatus | undefined; limit: number; cursor: string | undefined }) {
  const after = decodeCursorParts(q.cursor, CURSOR_PARTS)
  const rows = rowsOf<Record<string, unknown>>(await db.execute(sql`
    select *, ${RANK} as rank from tasks
    where org_id = ${orgId}
      ${q.projectId !== undefined ? sql`and project_id = ${q.projectId}` : sql``}
      ${q.status !== undefined ? sql`and status = ${q.status}` : sql``}
      ${after ? sql`and (${RANK}, position, id) > (${Number(after[0])}, ${after[1]}::text collate "C", ${after[2]})` : sql``}
    order by ${RANK}, position, id
    limit ${q.limit + 1}`))
  const page = pageOf(rows, q.limit, (r) => `${Number(r.rank)}.${String(r.position)}.${String(r.id)}`)
  return { items: page.items.map(taskFromRow), nextCursor: page.nextCursor }
}

function taskFromRow(r: Record<string, unknown>): TaskRow {
  return {
    id: r.id as string, orgId: r.org_id as string, projectId: (r.project_id as string | null) ?? null, title: r.title as string,
    description: r.description as string, status: r.status as TaskStatus, position: r.position as string, runId: (r.run_id as string | null) ?? null,
    assigneeId: (r.assignee_id as string | null) ?? null, revision: Number(r.revision), createdAt: dateOf(r.created_at),
    updatedAt: dateOf(r.updated_at), createdBy: (r.created_by as string | null) ?? null
  }
}
