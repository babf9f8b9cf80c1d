import { and, asc, desc, eq, lt, sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { CONTROL_CHANNEL } from '../../plugins/event-bus.js'
import { threadBusy } from '../../plugins/errors.js'
import type { Principal } from '../auth/principal.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { decodeCursor, pageOf } from '../db/paging.js'
import { isoOf, isoOrNull } from '../db/rows.js'
import type { Static } from 'typebox'
import type { Run } from '../../schemas/runs.js'
import { newId } from '../db/ids.js'
import { appendEvent, type EventBatcher } from './events.js'
import type { FollowUpRun } from './skills-port.js'
import { runs, type RunOrigin, type RunSettings, type RunStatus } from './tables.js'

export type RunRow = typeof runs.$inferSelect

/** Contract 5's run, as the wire shows it. */
export type RunWire = Static<typeof Run>

export function runToWire(run: RunRow): RunWire {
  return {
    id: run.id,
    rootRunId: run.rootRunId,
    parentRunId: run.parentRunId,
    engine: run.engine,
    model: run.model,
    prompt: run.prompt,
    status: run.status,
    origin: run.origin,
    error: run.error,
    createdAt: run.createdAt.toISOString(),
    startedAt: isoOrNull(run.startedAt),
    finishedAt: isoOrNull(run.finishedAt),
    userId: run.userId,
    metadata: run.metadata,
    output: run.output,
    usage: run.inputTokens === null && run.outputTokens === null ? null : { inputTokens: run.inputTokens ?? 0, outputTokens: run.outputTokens ?? 0 },
    instructions: run.instructions,
    settings: settingsToWire(run.settings),
    attachments: run.attachments
  }
}

/** Every setting of the wire's RunSettings, null where the run named none. */
export function settingsToWire(s: RunSettings): RunWire['settings'] {
  return {
    temperature: s.temperature ?? null,
    maxOutputTokens: s.maxOutputTokens ?? null,
    responseFormat: (s.responseFormat ?? null) as RunWire['settings']['responseFormat'],
    tools: s.tools ?? null
  }
}

/** Contract 5: origin is the server's: web (session), api (key), dev (dev org). */
export function originOf(principal: Principal): RunOrigin {
  return principal.kind === 'user' ? 'web' : principal.kind === 'key' ? 'api' : 'dev'
}

/** Whose run it is: only the org and the user are read (a principal, or a system starter such as the Slack ingress). */
export type RunOwner = Pick<Principal, 'orgId' | 'userId'> & Partial<Principal>

export interface CreateRunInput {
  /** the run's id when the caller needs it before the insert (a row that refers to it); otherwise a new one */
  id?: string | undefined
  prompt: string
  engine: string
  model: string | null
  rootRunId?: string | undefined
  metadata?: Record<string, unknown> | undefined
  secretNames?: string[] | undefined
  origin: RunOrigin
  instructions?: string | null | undefined
  settings?: RunSettings | undefined
  /** upload ids copied into the workspace before the run starts */
  attachments?: string[] | undefined
  /** joining a thread whose run has not ended: wait for it (default), refuse, or cancel it */
  multitask?: 'enqueue' | 'reject' | 'interrupt' | undefined
}

/** Statuses of a run that has not ended: a thread with one is busy. */
const LIVE = sql`('queued', 'running')`

/**
 * Inserts a queued run in the caller's transaction (announce it with `announceQueued` after commit). Joining a
 * thread: the given id must be a run of this org; the new run hangs off the thread's latest run.
 * Returns null when the thread is not in the org.
 */
export async function createRun(tx: Tx, principal: RunOwner, input: CreateRunInput): Promise<RunRow | null> {
  const id = input.id ?? newId()
  let rootRunId = id
  let parentRunId: string | null = null
  if (input.rootRunId !== undefined) {
    const [anchor] = await tx.select({ rootRunId: runs.rootRunId }).from(runs)
      .where(and(eq(runs.orgId, principal.orgId), eq(runs.id, input.rootRunId)))
    if (!anchor) return null
    rootRunId = anchor.rootRunId
    // one dispatch into a thread at a time: the busy check and the parent are then exact
    await tx.execute(sql`select 1 from runs where org_id = ${principal.orgId} and id = ${rootRunId} for update`)
    if (input.multitask === 'reject') {
      const busy = rowsOf(await tx.execute(sql`select 1 from runs where org_id = ${principal.orgId} and root_run_id = ${rootRunId} and status in ${LIVE} limit 1`))
      if (busy.length > 0) throw threadBusy()
    } else if (input.multitask === 'interrupt') {
      await interruptThread(tx, principal.orgId, rootRunId)
    }
    const [latest] = await tx.select({ id: runs.id }).from(runs)
      .where(and(eq(runs.orgId, principal.orgId), eq(runs.rootRunId, rootRunId)))
      .orderBy(desc(runs.id)).limit(1)
    parentRunId = latest?.id ?? rootRunId
  }
  const [run] = await tx.insert(runs).values({
    id,
    orgId: principal.orgId,
    rootRunId,
    parentRunId,
    engine: input.engine,
    model: input.model,
    prompt: input.prompt,
    status: 'queued',
    origin: input.origin,
    metadata: input.metadata ?? {},
    secretNames: input.secretNames ?? [],
    userId: principal.userId,
    instructions: input.instructions ?? null,
    settings: input.settings ?? {},
    attachments: input.attachments ?? []
  }).returning()
  return run!
}

/**
 * Contract 13.2's `interrupt`: the thread's queued runs are cancelled at once, its running
 * ones flagged (their worker, on whichever instance, is told), all with `error: "interrupted"`.
 */
async function interruptThread(tx: Tx, orgId: string, rootRunId: string): Promise<void> {
  const queued = rowsOf<{ id: string }>(await tx.execute(sql`
    update runs set status = 'cancelled', finished_at = now(), error = 'interrupted'
    where org_id = ${orgId} and root_run_id = ${rootRunId} and status = 'queued' returning id`))
  for (const { id } of queued) {
    await appendEvent(tx, { orgId, runId: id, rootRunId, type: 'run.cancelled', data: { reason: 'interrupted' } })
  }
  const running = rowsOf<{ id: string }>(await tx.execute(sql`
    update runs set cancel_requested = true, error = 'interrupted'
    where org_id = ${orgId} and root_run_id = ${rootRunId} and status = 'running' returning id`))
  for (const { id } of running) {
    await tx.execute(sql`select pg_notify(${CONTROL_CHANNEL}, ${JSON.stringify({ kind: 'cancel', runId: id })})`)
  }
}

export interface NewThreadRun {
  id: string
  orgId: string
  engine: string
  model: string | null
  prompt: string
  origin: RunOrigin
  metadata: Record<string, unknown>
  userId: string | null
  instructions?: string | null | undefined
  settings?: RunSettings | undefined
  attachments?: string[] | undefined
}

/**
 * Queued runs that each start a thread (an automation's fires), in the caller's
 * transaction; announce them after it commits. The batch travels as one JSON parameter
 * (`jsonb_to_recordset`): for hundreds of rows about five times faster than a VALUES list
 * with a parameter per column.
 */
export async function insertThreadRoots<T extends NewThreadRun>(tx: Tx, rows: T[]): Promise<T[]> {
  if (rows.length === 0) return []
  const batch = JSON.stringify(rows.map((r) => ({
    id: r.id, org_id: r.orgId, engine: r.engine, model: r.model, prompt: r.prompt, origin: r.origin, metadata: r.metadata, user_id: r.userId,
    instructions: r.instructions ?? null, settings: r.settings ?? {}, attachments: r.attachments ?? []
  })))
  await tx.execute(sql`
    insert into runs (id, org_id, root_run_id, engine, model, prompt, status, origin, metadata, user_id, instructions, settings, attachments)
    select id, org_id, id, engine, model, prompt, 'queued', origin, metadata, user_id, instructions, settings, attachments
    from jsonb_to_recordset(${batch}::jsonb)
      as r(id text, org_id text, engine text, model text, prompt text, origin text, metadata jsonb, user_id text, instructions text, settings jsonb, attachments jsonb)`)
  return rows
}

/** A run another finished run starts (a playbook's next step): inserted in the finishing transaction. */
export async function insertFollowUp(tx: Tx, run: FollowUpRun): Promise<RunRow> {
  const [row] = await tx.insert(runs).values({ ...run, status: 'queued' }).returning()
  return row!
}

/**
 * A new thread's first run in ONE statement (one round trip, committed on its own): when
 * `guard` is given (an `UPDATE … RETURNING` that stores the idempotent answer), the run is
 * inserted only if the guard yields a row, so the run and its stored answer commit together.
 * Returns null when the guard yielded nothing (the idempotency lock was lost).
 */
export async function insertThreadRoot(db: Db, row: typeof runs.$inferInsert & { id: string; createdAt: Date }, guard: SQL | null, when?: SQL): Promise<boolean> {
  const values = sql`${row.id}, ${row.orgId}, ${row.id}, null, ${row.engine}, ${row.model ?? null}, ${row.prompt}, 'queued',
    ${row.origin}, ${JSON.stringify(row.metadata ?? {})}::jsonb, ${JSON.stringify(row.secretNames ?? [])}::jsonb, ${row.userId ?? null}, ${row.createdAt.toISOString()}::timestamptz,
    ${row.instructions ?? null}, ${JSON.stringify(row.settings ?? {})}::jsonb, ${JSON.stringify(row.attachments ?? [])}::jsonb`
  const cols = sql`(id, org_id, root_run_id, parent_run_id, engine, model, prompt, status, origin, metadata, secret_names, user_id, created_at, instructions, settings, attachments)`
  const result = guard
    ? await db.execute(sql`with guard as (${guard}) insert into runs ${cols} select ${values} from guard returning id`)
    : await db.execute(when ? sql`insert into runs ${cols} select ${values} where ${when} returning id` : sql`insert into runs ${cols} values (${values}) returning id`)
  return rowsOf(result).length === 1
}

/**
 * The `run.queued` events of runs that committed. One that cannot be stored now (the
 * database went away after the commit) is logged and left to the sweeper, which looks for
 * exactly that: this never throws, since the runs exist whatever happens here.
 */
export async function announceCommitted(events: EventBatcher, runs: Array<Pick<RunRow, 'id' | 'orgId' | 'rootRunId' | 'engine' | 'model'>>, log: FastifyBaseLogger): Promise<void> {
  await Promise.all(runs.map((run) => announceQueued(events, run).catch((err: unknown) => {
    log.warn({ err, runId: run.id }, 'run.queued not stored after the run committed; the sweeper will announce it')
  })))
}

/** The `run.queued` event, written after the run's own (durable) transaction committed. */
export async function announceQueued(events: EventBatcher, run: Pick<RunRow, 'id' | 'orgId' | 'rootRunId' | 'engine' | 'model'>): Promise<void> {
  await events.append({ orgId: run.orgId, runId: run.id, rootRunId: run.rootRunId, type: 'run.queued', data: { engine: run.engine, model: run.model } })
}

export async function getRun(db: Db | Tx, orgId: string, id: string): Promise<RunRow | null> {
  const [run] = await db.select().from(runs).where(and(eq(runs.orgId, orgId), eq(runs.id, id)))
  return run ?? null
}

export async function listRuns(db: Db, orgId: string, q: { status?: RunStatus | undefined; rootRunId?: string | undefined; limit: number; cursor: string | undefined }) {
  const cursor = decodeCursor(q.cursor)
  const rows = await db.select().from(runs).where(and(
    eq(runs.orgId, orgId),
    q.status ? eq(runs.status, q.status) : undefined,
    q.rootRunId ? eq(runs.rootRunId, q.rootRunId) : undefined,
    cursor ? lt(runs.id, cursor) : undefined
  )).orderBy(desc(runs.id)).limit(q.limit + 1)
  return pageOf(rows, q.limit, (run) => run.id)
}

export interface ThreadWire {
  rootRunId: string
  title: string
  runCount: number
  latestRunId: string
  latestStatus: RunStatus
  createdAt: string
  updatedAt: string
}

interface ThreadRow {
  root_run_id: string
  title: string
  run_count: number
  latest_run_id: string
  latest_status: RunStatus
  created_at: Date | string
  updated_at: Date | string
}

function threadToWire(r: ThreadRow): ThreadWire {
  return {
    rootRunId: r.root_run_id,
    title: r.title,
    runCount: Number(r.run_count),
    latestRunId: r.latest_run_id,
    latestStatus: r.latest_status,
    createdAt: isoOf(r.created_at),
    updatedAt: isoOf(r.updated_at)
  }
}

const threadSelect = (orgId: string) => sql`
  select t.root_run_id, left(r.prompt, 200) as title, t.run_count, l.id as latest_run_id, l.status as latest_status,
         r.created_at, coalesce(l.finished_at, l.started_at, l.created_at) as updated_at
  from (select root_run_id, count(*)::int as run_count, max(id) as latest_id from runs where org_id = ${orgId} group by root_run_id) t
  join runs r on r.id = t.root_run_id and r.org_id = ${orgId}
  join runs l on l.id = t.latest_id and l.org_id = ${orgId}`

/** Threads newest first (by their root run's id). */
export async function listThreads(db: Db, orgId: string, q: { limit: number; cursor: string | undefined }) {
  const cursor = decodeCursor(q.cursor)
  const rows = rowsOf<ThreadRow>(await db.execute(sql`
    ${threadSelect(orgId)}
    ${cursor ? sql`where t.root_run_id < ${cursor}` : sql``}
    order by t.root_run_id desc limit ${q.limit + 1}`))
  const page = pageOf(rows, q.limit, (row) => row.root_run_id)
  return { items: page.items.map(threadToWire), nextCursor: page.nextCursor }
}

export async function getThread(db: Db, orgId: string, rootRunId: string) {
  const rows = rowsOf<ThreadRow>(await db.execute(sql`${threadSelect(orgId)} where t.root_run_id = ${rootRunId}`))
  if (!rows[0]) return null
  const members = await db.select().from(runs)
    .where(and(eq(runs.orgId, orgId), eq(runs.rootRunId, rootRunId))).orderBy(asc(runs.id))
  return { thread: threadToWire(rows[0]), runs: members }
}

/**
 * Cancel (idempotent): a queued run is cancelled at once; a running one is flagged and
 * its worker, on whichever instance, is told through NOTIFY; a finished one is left as is.
 */
export async function cancelRun(db: Db, orgId: string, id: string): Promise<RunRow | null> {
  return db.transaction(async (tx) => {
    const [run] = await tx.select().from(runs).where(and(eq(runs.orgId, orgId), eq(runs.id, id))).for('update')
    if (!run) return null
    if (run.status === 'queued') {
      const [done] = await tx.update(runs).set({ status: 'cancelled', finishedAt: sql`now()`, error: null })
        .where(eq(runs.id, id)).returning()
      await appendEvent(tx, { orgId, runId: id, rootRunId: run.rootRunId, type: 'run.cancelled', data: { reason: 'cancelled before start' } })
      return done!
    }
    if (run.status === 'running' && !run.cancelRequested) {
      const [flagged] = await tx.update(runs).set({ cancelRequested: true }).where(eq(runs.id, id)).returning()
      await tx.execute(sql`select pg_notify(${CONTROL_CHANNEL}, ${JSON.stringify({ kind: 'cancel', runId: id })})`)
      return flagged!
    }
    return run
  })
}
