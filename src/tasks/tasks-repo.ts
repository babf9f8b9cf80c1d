import { and, eq, sql, type SQL } from 'drizzle-orm'
import { generateNKeysBetween } from 'fractional-indexing'
import { TASK_STATUSES } from '../../schemas/tasks.js'
import { members } from '../auth/tables.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { newId } from '../db/ids.js'
import { decodeCursorParts, pageOf } from '../db/paging.js'
import { isForeignKeyViolation, isUniqueViolation } from '../db/faults.js'
import { isoOf, jsonOf } from '../db/rows.js'
import type { FinishedRun, FollowUpRun } from '../runs/ports/skills.js'
import { projects, tasks, type TaskStatus } from './tables.js'

export type TaskRow = typeof tasks.$inferSelect

export function taskToWire(t: TaskRow) {
  return {
    id: t.id,
    title: t.title,
    description: t.description,
    status: t.status,
    position: t.position,
    projectId: t.projectId,
    runId: t.runId,
    assigneeId: t.assigneeId,
    revision: t.revision,
    createdAt: isoOf(t.createdAt),
    updatedAt: isoOf(t.updatedAt),
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
 * A key between two keys (null: an end), one of a few spread over the gap at random, so
 * that writers placing into one gap at once (appending, most often) rarely pick the same.
 */
function keyBetween(lower: string | null, upper: string | null): string {
  const n = 1 + Math.floor(Math.random() * 8)
  return generateNKeysBetween(lower, upper, n)[Math.floor(Math.random() * n)]!
}

/** The position after the column's last task (the placed task itself left out). */
async function endOf(db: Db | Tx, c: Column, except: string | null): Promise<string> {
  const [last] = rowsOf<{ position: string }>(
    await db.execute(sql`
    select position from tasks where ${inColumn(c)} ${except ? sql`and id <> ${except}` : sql``}
    order by position desc limit 1`)
  )
  return keyBetween(last?.position ?? null, null)
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
  | { refused: 'busy' }

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

/**
 * Places a task without locking its column: a key is chosen between the neighbours just
 * read, and the unique index on (column, position) refuses the second of two writers that
 * chose the same key for the same gap; that writer reads the column again. Writers into
 * different gaps never wait for each other. Inside a transaction each attempt is a
 * savepoint, so a refused one does not abort the caller's work.
 */
const PLACE_ATTEMPTS = 20

async function placing<T>(db: Db | Tx, inTransaction: boolean, attempt: (q: Db | Tx) => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return inTransaction ? await (db as Tx).transaction((savepoint) => attempt(savepoint)) : await attempt(db)
    } catch (err) {
      if (!isUniqueViolation(err)) throw err
      if (n >= PLACE_ATTEMPTS) throw new Refused({ refused: 'busy' })
    }
  }
}

async function checkProject(db: Db, orgId: string, projectId: string | null): Promise<void> {
  if (projectId === null) return
  const [row] = await db
    .select({ id: projects.id })
    .from(projects)
    .where(and(eq(projects.orgId, orgId), eq(projects.id, projectId)))
  if (!row) throw new Refused({ refused: 'no_project' })
}

async function checkAssignee(db: Db, orgId: string, userId: string | null): Promise<void> {
  if (userId === null) return
  const [row] = await db
    .select({ userId: members.userId })
    .from(members)
    .where(and(eq(members.orgId, orgId), eq(members.userId, userId)))
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
  return refusing(async () => {
    await checkProject(db, orgId, t.projectId)
    await checkAssignee(db, orgId, t.assigneeId)
    const column = { orgId, projectId: t.projectId, status: t.status }
    const id = newId()
    try {
      return await placing(db, false, async (q) => {
        const [row] = await q
          .insert(tasks)
          .values({ id, orgId, ...t, position: await endOf(q, column, null) })
          .returning()
        return row!
      })
    } catch (err) {
      // the project was deleted between the check and the insert
      if (isForeignKeyViolation(err))
        throw new Refused({ refused: t.projectId !== null ? 'no_project' : 'no_assignee' })
      throw err
    }
  })
}

export async function getTask(db: Db | Tx, orgId: string, id: string): Promise<TaskRow | null> {
  const [row] = await db
    .select()
    .from(tasks)
    .where(and(eq(tasks.orgId, orgId), eq(tasks.id, id)))
  return row ?? null
}

/**
 * Writes a task at `revision` (null: whatever it is), one conditional UPDATE: of two
 * writers with one revision exactly one wins; the other learns why it did not.
 */
async function writeTask(
  db: Db | Tx,
  orgId: string,
  id: string,
  revision: number | null,
  change: Partial<typeof tasks.$inferInsert>
): Promise<TaskRow> {
  const [row] = await db
    .update(tasks)
    .set({ ...change, revision: sql`${tasks.revision} + 1`, updatedAt: sql`now()` })
    .where(and(eq(tasks.orgId, orgId), eq(tasks.id, id), revision === null ? undefined : eq(tasks.revision, revision)))
    .returning()
  if (row) return row
  const current = await getTask(db, orgId, id)
  throw new Refused(current ? { refused: 'stale', current: current.revision } : { refused: 'missing' })
}

export interface TaskChange {
  title?: string | undefined
  description?: string | undefined
  status?: TaskStatus | undefined
  projectId?: string | null | undefined
  assigneeId?: string | null | undefined
}

/** Edits a task at `revision`; a new status or project puts it last in its new column. */
export async function updateTask(
  db: Db,
  orgId: string,
  id: string,
  change: TaskChange,
  revision: number
): Promise<TaskRow | TaskRefusal> {
  return refusing(async () => {
    const task = await getTask(db, orgId, id)
    if (!task) throw new Refused({ refused: 'missing' })
    if (task.revision !== revision) throw new Refused({ refused: 'stale', current: task.revision })
    if (change.projectId !== undefined) await checkProject(db, orgId, change.projectId)
    if (change.assigneeId !== undefined) await checkAssignee(db, orgId, change.assigneeId)
    const column = {
      orgId,
      projectId: change.projectId === undefined ? task.projectId : change.projectId,
      status: change.status ?? task.status
    }
    const moved = column.projectId !== task.projectId || column.status !== task.status
    if (!moved) return writeTask(db, orgId, id, revision, change)
    return placing(db, false, async (q) =>
      writeTask(q, orgId, id, revision, { ...change, position: await endOf(q, column, id) })
    )
  })
}

export async function deleteTask(db: Db, orgId: string, id: string): Promise<boolean> {
  const rows = await db
    .delete(tasks)
    .where(and(eq(tasks.orgId, orgId), eq(tasks.id, id)))
    .returning({ id: tasks.id })
  return rows.length === 1
}

interface MovePlan {
  task: { project_id: string | null; revision: number } | null
  before: { id: string; project_id: string | null; status: string; position: string } | null
  after: { id: string; project_id: string | null; status: string; position: string } | null
  above_before: string | null
  below_after: string | null
  last: string | null
}

/**
 * Everything a move needs in one statement: the task, its anchors, the neighbours around
 * them in the target column and the column's end (each an index probe).
 */
async function planMove(
  db: Db,
  orgId: string,
  id: string,
  status: TaskStatus,
  before: string | null,
  after: string | null
): Promise<MovePlan> {
  const column = sql`org_id = ${orgId} and coalesce(project_id, '') = coalesce((select project_id from t), '') and status = ${status} and id <> ${id}`
  const anchor = (anchorId: string | null) =>
    sql`select id, project_id, status, position from tasks where org_id = ${orgId} and id = ${anchorId}`
  const [plan] = rowsOf<MovePlan>(
    await db.execute(sql`
    with t as (select project_id, revision from tasks where org_id = ${orgId} and id = ${id}),
         b as (${anchor(before)}),
         a as (${anchor(after)})
    select (select row_to_json(t) from t) as task,
           (select row_to_json(b) from b) as before,
           (select row_to_json(a) from a) as after,
           (select position from tasks where ${column} and position < (select position from b) order by position desc limit 1) as above_before,
           (select position from tasks where ${column} and position > (select position from a) order by position asc limit 1) as below_after,
           (select position from tasks where ${column} order by position desc limit 1) as last`)
  )
  return { ...plan!, task: jsonOf(plan!.task), before: jsonOf(plan!.before), after: jsonOf(plan!.after) }
}

/**
 * A task's move: into `status` (same project), directly above `before`, directly below
 * `after`, between both (which must be neighbours), or last. Writes the moved task only:
 * its new key lies between its new neighbours' keys. Two statements, no lock.
 */
export async function moveTask(
  db: Db,
  orgId: string,
  id: string,
  to: { status: TaskStatus; before?: string | undefined; after?: string | undefined },
  revision: number
): Promise<TaskRow | TaskRefusal> {
  return refusing(() =>
    placing(db, false, async () => {
      const plan = await planMove(db, orgId, id, to.status, to.before ?? null, to.after ?? null)
      if (!plan.task) throw new Refused({ refused: 'missing' })
      if (plan.task.revision !== revision) throw new Refused({ refused: 'stale', current: plan.task.revision })
      const check = (field: 'before' | 'after', anchorId: string | undefined, row: MovePlan['before']) => {
        if (anchorId === undefined) return null
        if (anchorId === id) throw new Refused({ refused: 'anchor_is_self' })
        if (!row) throw new Refused({ refused: 'no_anchor', field })
        if (row.status !== to.status || row.project_id !== plan.task!.project_id)
          throw new Refused({ refused: 'anchor_elsewhere', field })
        return row.position
      }
      const upper = check('before', to.before, plan.before)
      const lower = check('after', to.after, plan.after)
      let position: string
      if (upper !== null && lower !== null) {
        if (!(lower < upper) || plan.below_after !== upper) throw new Refused({ refused: 'not_neighbours' })
        position = keyBetween(lower, upper)
      } else if (upper !== null) {
        position = keyBetween(plan.above_before, upper)
      } else if (lower !== null) {
        position = keyBetween(lower, plan.below_after)
      } else {
        position = keyBetween(plan.last, null)
      }
      return writeTask(db, orgId, id, revision, { status: to.status, position })
    })
  )
}

/**
 * Starts work on a task in the transaction of its run: `doing` (last in that column unless
 * it is there already) with the run's id.
 */
export async function startTaskRun(tx: Tx, orgId: string, id: string, runId: string): Promise<TaskRow | null> {
  return placing(tx, true, async (q) => {
    const task = await getTask(q, orgId, id)
    if (!task) return null
    const position =
      task.status === 'doing'
        ? task.position
        : await endOf(q, { orgId, projectId: task.projectId, status: 'doing' }, id)
    return writeTask(q, orgId, id, null, { status: 'doing', position, runId })
  })
}

/**
 * In the transaction that finished a run: a task's run that succeeded moves the task to
 * `done` (last there), once, and only while the task still names that run.
 */
export async function finishTaskRun(tx: Tx, run: FinishedRun): Promise<FollowUpRun[]> {
  if (run.status !== 'succeeded' || typeof run.metadata.taskId !== 'string') return []
  const taskId = run.metadata.taskId
  await placing(tx, true, async (q) => {
    const [task] = await q
      .select()
      .from(tasks)
      .where(and(eq(tasks.orgId, run.orgId), eq(tasks.id, taskId), eq(tasks.runId, run.id)))
    if (!task || task.status === 'done') return
    await q
      .update(tasks)
      .set({
        status: 'done',
        position: await endOf(q, { orgId: run.orgId, projectId: task.projectId, status: 'done' }, task.id),
        revision: sql`${tasks.revision} + 1`,
        updatedAt: sql`now()`
      })
      .where(and(eq(tasks.id, task.id), eq(tasks.runId, run.id)))
  })
  return []
}

const RANK = sql.raw(`case status ${TASK_STATUSES.map((s, i) => `when '${s}' then ${i}`).join(' ')} end`)
const CURSOR_PARTS = [/^[0-9]$/, /^[0-9A-Za-z]{1,900}$/, /^[A-Za-z0-9_-]{1,64}$/] as const

/** Tasks by status (todo, doing, done), then position: the board read top to bottom, column by column. */
export async function listTasks(
  db: Db,
  orgId: string,
  q: { projectId?: string | undefined; status?: TaskStatus | undefined; limit: number; cursor: string | undefined }
) {
  const after = decodeCursorParts(q.cursor, CURSOR_PARTS)
  const rows = await db
    .select()
    .from(tasks)
    .where(
      and(
        eq(tasks.orgId, orgId),
        q.projectId !== undefined ? eq(tasks.projectId, q.projectId) : undefined,
        q.status !== undefined ? eq(tasks.status, q.status) : undefined,
        after
          ? sql`(${RANK}, ${tasks.position}, ${tasks.id}) > (${Number(after[0])}, ${after[1]}::text collate "C", ${after[2]})`
          : undefined
      )
    )
    .orderBy(RANK, tasks.position, tasks.id)
    .limit(q.limit + 1)
  return pageOf(rows, q.limit, (t) => `${TASK_STATUSES.indexOf(t.status)}.${t.position}.${t.id}`)
}
