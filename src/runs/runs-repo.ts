import { and, asc, desc, eq, sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import { CONTROL_CHANNEL } from '../../plugins/event-bus.js'
import { threadBusy } from '../../plugins/errors.js'
import type { Principal } from '../auth/principal.js'
import { builtOnce } from '../db/built-once.js'
import { PLAN_EACH_TIME, rowsOf, type Db, type Tx } from '../db/client.js'
import { keyset } from '../db/paging.js'
import { boolOf, dateOf, dateOrNull, isoOf, isoOrNull, jsonOf } from '../db/rows.js'
import type { Static } from 'typebox'
import type { Run } from '../../schemas/runs.js'
import { newId } from '../db/ids.js'
import { appendEvent, eventCtes, notifyStored, storedAll, type EventBatcher, type NewEvent } from './events.js'
import { currentTraceparent } from '../telemetry/tracing.js'
import type { FollowUpRun } from './ports/skills.js'
import {
  appendTranscript,
  contextSizes,
  replayWire,
  SHORTENED_RESULT_CHARS,
  type TranscriptMessage
} from './transcripts.js'
import type { WireMessage } from './engines/types.js'
import {
  runs,
  type RememberedFact,
  type RunOrigin,
  type RunSettings,
  type RunStatus,
  type SuspendedRun
} from './tables.js'

export type RunRow = typeof runs.$inferSelect

/** A run, as the wire shows it. */
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
    usage:
      run.inputTokens === null && run.outputTokens === null
        ? null
        : { inputTokens: run.inputTokens ?? 0, outputTokens: run.outputTokens ?? 0 },
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

/** Origin is the server's: web (session), api (key), dev (dev org). */
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
  /** told, in the transaction, of the thread's runs an `interrupt` ended */
  onEnded?: OnRunsEnded | undefined
}

/** A run that ended outside its worker (cancelled while queued or waiting, interrupted, its worker lost). */
export interface EndedRun {
  id: string
  orgId: string
  rootRunId: string
  origin: RunOrigin
  /** how it ended (cancelled, or failed when its worker was lost) */
  status: RunStatus
  userId: string | null
  /** the facts it remembered (the `remember` tool), captured whatever its end */
  remembered: RememberedFact[] | null
}

/** Called inside the transaction that ended runs outside their worker. */
export type OnRunsEnded = (tx: Tx, ended: EndedRun[]) => Promise<void>

/** What an ended run's hand-written `returning` gives, as an EndedRun. */
export const ENDED_COLUMNS = sql`id, org_id, root_run_id, origin, status, user_id, remembered`
export function endedOf(r: Record<string, unknown>): EndedRun {
  return {
    id: r.id as string,
    orgId: r.org_id as string,
    rootRunId: r.root_run_id as string,
    origin: r.origin as RunOrigin,
    status: r.status as RunStatus,
    userId: (r.user_id as string | null) ?? null,
    remembered: jsonOf<RememberedFact[] | null>(r.remembered) ?? null
  }
}

/** Statuses of a run that has not ended: a thread with one is busy. */
const LIVE = sql`('queued', 'running', 'requires_action')`

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
    const [anchor] = await tx
      .select({ rootRunId: runs.rootRunId })
      .from(runs)
      .where(and(eq(runs.orgId, principal.orgId), eq(runs.id, input.rootRunId)))
    if (!anchor) return null
    rootRunId = anchor.rootRunId
    // one dispatch into a thread at a time: the busy check and the parent are then exact
    await tx.execute(sql`select 1 from runs where org_id = ${principal.orgId} and id = ${rootRunId} for update`)
    if (input.multitask === 'reject') {
      const busy = rowsOf(
        await tx.execute(
          sql`select 1 from runs where org_id = ${principal.orgId} and root_run_id = ${rootRunId} and status in ${LIVE} limit 1`
        )
      )
      if (busy.length > 0) throw threadBusy()
    } else if (input.multitask === 'interrupt') {
      await interruptThread(tx, principal.orgId, rootRunId, input.onEnded)
    }
    const [latest] = await tx
      .select({ id: runs.id })
      .from(runs)
      .where(and(eq(runs.orgId, principal.orgId), eq(runs.rootRunId, rootRunId)))
      .orderBy(desc(runs.id))
      .limit(1)
    parentRunId = latest?.id ?? rootRunId
  }
  const [run] = await tx
    .insert(runs)
    .values({
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
      attachments: input.attachments ?? [],
      traceparent: currentTraceparent()
    })
    .returning()
  return run!
}

/**
 * A thread's `interrupt`: the thread's queued and waiting runs are cancelled at once (the
 * calls a waiting one asked people about are dropped with it), its running
 * ones flagged (their worker, on whichever instance, is told), all with `error: "interrupted"`.
 */
async function interruptThread(
  tx: Tx,
  orgId: string,
  rootRunId: string,
  onEnded: OnRunsEnded | undefined
): Promise<void> {
  const queued = rowsOf<Record<string, unknown>>(
    await tx.execute(sql`
    update runs set status = 'cancelled', finished_at = now(), error = 'interrupted', suspended = null, resume_at = null
    where org_id = ${orgId} and root_run_id = ${rootRunId} and status in ('queued', 'requires_action') returning ${ENDED_COLUMNS}`)
  ).map(endedOf)
  if (queued.length > 0) await onEnded?.(tx, queued)
  for (const { id } of queued) {
    await appendEvent(tx, { orgId, runId: id, rootRunId, type: 'run.cancelled', data: { reason: 'interrupted' } })
  }
  if (queued.length > 0) {
    await tx.execute(sql`update tool_approvals set status = 'cancelled', decided_at = now()
      where org_id = ${orgId} and run_id in (${sql.join(
        queued.map((r) => sql`${r.id}`),
        sql`, `
      )}) and status = 'pending'`)
  }
  const running = rowsOf<{ id: string }>(
    await tx.execute(sql`
    update runs set cancel_requested = true, error = 'interrupted'
    where org_id = ${orgId} and root_run_id = ${rootRunId} and status = 'running' returning id`)
  )
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
  const batch = JSON.stringify(
    rows.map((r) => ({
      id: r.id,
      org_id: r.orgId,
      engine: r.engine,
      model: r.model,
      prompt: r.prompt,
      origin: r.origin,
      metadata: r.metadata,
      user_id: r.userId,
      instructions: r.instructions ?? null,
      settings: r.settings ?? {},
      attachments: r.attachments ?? []
    }))
  )
  await tx.execute(sql`
    insert into runs (id, org_id, root_run_id, engine, model, prompt, status, origin, metadata, user_id, instructions, settings, attachments, traceparent)
    select id, org_id, id, engine, model, prompt, 'queued', origin, metadata, user_id, instructions, settings, attachments, ${currentTraceparent() ?? null}
    from jsonb_to_recordset(${batch}::jsonb)
      as r(id text, org_id text, engine text, model text, prompt text, origin text, metadata jsonb, user_id text, instructions text, settings jsonb, attachments jsonb)`)
  return rows
}

/** A run another finished run starts (a playbook's next step): inserted in the finishing transaction. */
export async function insertFollowUp(tx: Tx, run: FollowUpRun): Promise<RunRow> {
  const [row] = await tx
    .insert(runs)
    .values({ ...run, status: 'queued', traceparent: currentTraceparent() })
    .returning()
  return row!
}

/**
 * A new thread's first run in ONE statement (one round trip, committed on its own): when
 * `guard` is given (an `UPDATE … RETURNING` that stores the idempotent answer), the run is
 * inserted only if the guard yields a row, so the run and its stored answer commit together.
 * Returns null when the guard yielded nothing (the idempotency lock was lost).
 */
export async function insertThreadRoot(
  db: Db,
  row: typeof runs.$inferInsert & { id: string; createdAt: Date },
  guard: SQL | null,
  when?: SQL
): Promise<boolean> {
  const values = sql`${row.id}, ${row.orgId}, ${row.id}, null, ${row.engine}, ${row.model ?? null}, ${row.prompt}, 'queued',
    ${row.origin}, ${JSON.stringify(row.metadata ?? {})}::jsonb, ${JSON.stringify(row.secretNames ?? [])}::jsonb, ${row.userId ?? null}, ${row.createdAt.toISOString()}::timestamptz,
    ${row.instructions ?? null}, ${JSON.stringify(row.settings ?? {})}::jsonb, ${JSON.stringify(row.attachments ?? [])}::jsonb,
    ${row.traceparent ?? null}`
  const cols = sql`(id, org_id, root_run_id, parent_run_id, engine, model, prompt, status, origin, metadata, secret_names, user_id, created_at, instructions, settings, attachments, traceparent)`
  const result = guard
    ? await db.execute(sql`with guard as (${guard}) insert into runs ${cols} select ${values} from guard returning id`)
    : await db.execute(
        when
          ? sql`insert into runs ${cols} select ${values} where ${when} returning id`
          : sql`insert into runs ${cols} values (${values}) returning id`
      )
  return rowsOf(result).length === 1
}

/**
 * The `run.queued` events of runs that committed. One that cannot be stored now (the
 * database went away after the commit) is logged and left to the sweeper, which looks for
 * exactly that: this never throws, since the runs exist whatever happens here.
 */
export async function announceCommitted(
  events: EventBatcher,
  runs: Array<Pick<RunRow, 'id' | 'orgId' | 'rootRunId' | 'engine' | 'model'>>,
  log: FastifyBaseLogger
): Promise<void> {
  await Promise.all(
    runs.map((run) =>
      announceQueued(events, run).catch((err: unknown) => {
        log.warn(
          { err, runId: run.id, orgId: run.orgId },
          'run.queued not stored after the run committed; the sweeper will announce it'
        )
      })
    )
  )
}

/** The `run.queued` event, written after the run's own (durable) transaction committed. */
export async function announceQueued(
  events: EventBatcher,
  run: Pick<RunRow, 'id' | 'orgId' | 'rootRunId' | 'engine' | 'model'>
): Promise<void> {
  await events.append({
    orgId: run.orgId,
    runId: run.id,
    rootRunId: run.rootRunId,
    type: 'run.queued',
    data: { engine: run.engine, model: run.model }
  })
}

export async function getRun(db: Db | Tx, orgId: string, id: string): Promise<RunRow | null> {
  const [run] = await db
    .select()
    .from(runs)
    .where(and(eq(runs.orgId, orgId), eq(runs.id, id)))
  return run ?? null
}

/**
 * Whether one of the run's tool calls still waits for a person: an approval pending and not
 * past its time. A `requires_action` run without one goes on by itself (a worker takes it
 * once its calls are decided or expired).
 */
export async function awaitsDecision(db: Db, orgId: string, runId: string): Promise<boolean> {
  const [row] = rowsOf<{ waiting: boolean | string }>(
    await db.execute(sql`
    select exists (select 1 from tool_approvals a where a.org_id = ${orgId} and a.run_id = ${runId}
                     and a.status = 'pending' and a.expires_at > now()) as waiting`)
  )
  return boolOf(row?.waiting)
}

/** The most facts one run keeps with the `remember` tool. */
export const MAX_REMEMBERED = 100

/**
 * Keeps a fact on a running run, captured when it ends whatever its status;
 * how many it keeps now, or null when it is full or not running.
 */
export async function rememberFact(db: Db, orgId: string, id: string, fact: RememberedFact): Promise<number | null> {
  const rows = rowsOf<{ n: number }>(
    await db.execute(sql`
    update runs set remembered = coalesce(remembered, '[]'::jsonb) || jsonb_build_array(jsonb_build_object('content', ${fact.content}::text, 'scope', ${fact.scope}::text))
    where org_id = ${orgId} and id = ${id} and status = 'running'
      and jsonb_array_length(coalesce(remembered, '[]'::jsonb)) < ${MAX_REMEMBERED}
    returning jsonb_array_length(remembered) as n`)
  )
  return rows[0] ? Number(rows[0].n) : null
}

export async function listRuns(
  db: Db,
  orgId: string,
  q: { status?: RunStatus | undefined; rootRunId?: string | undefined; limit: number; cursor: string | undefined }
) {
  const list = keyset(runs.id, 'desc', q)
  const rows = await db
    .select()
    .from(runs)
    .where(
      and(
        eq(runs.orgId, orgId),
        q.status ? eq(runs.status, q.status) : undefined,
        q.rootRunId ? eq(runs.rootRunId, q.rootRunId) : undefined,
        list.after
      )
    )
    .orderBy(list.orderBy)
    .limit(list.limit)
  return list.page(rows)
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
  const list = keyset(sql`t.root_run_id`, 'desc', q)
  const rows = rowsOf<ThreadRow>(
    await db.execute(sql`
    ${threadSelect(orgId)}
    ${list.after ? sql`where ${list.after}` : sql``}
    order by ${list.orderBy} limit ${list.limit}`)
  )
  const page = list.page(rows, (row) => row.root_run_id)
  return { items: page.items.map(threadToWire), nextCursor: page.nextCursor }
}

export async function getThread(db: Db, orgId: string, rootRunId: string) {
  const rows = rowsOf<ThreadRow>(await db.execute(sql`${threadSelect(orgId)} where t.root_run_id = ${rootRunId}`))
  if (!rows[0]) return null
  const members = await db
    .select()
    .from(runs)
    .where(and(eq(runs.orgId, orgId), eq(runs.rootRunId, rootRunId)))
    .orderBy(asc(runs.id))
  return { thread: threadToWire(rows[0]), runs: members }
}

/**
 * Cancel (idempotent): a queued run, or one waiting for people's decisions,
 * is cancelled at once; a running one is flagged and its worker, on whichever instance, is
 * told through NOTIFY; a finished one is left as is.
 */
export async function cancelRun(db: Db, orgId: string, id: string, onEnded?: OnRunsEnded): Promise<RunRow | null> {
  return db.transaction(async (tx) => {
    const [run] = await tx
      .select()
      .from(runs)
      .where(and(eq(runs.orgId, orgId), eq(runs.id, id)))
      .for('update')
    if (!run) return null
    if (run.status === 'queued' || run.status === 'requires_action') {
      const [done] = await tx
        .update(runs)
        .set({ status: 'cancelled', finishedAt: sql`now()`, error: null, suspended: null, resumeAt: null })
        .where(eq(runs.id, id))
        .returning()
      const reason = run.status === 'queued' ? 'cancelled before start' : 'cancelled while waiting for approval'
      await appendEvent(tx, { orgId, runId: id, rootRunId: run.rootRunId, type: 'run.cancelled', data: { reason } })
      await onEnded?.(tx, [done!])
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

/** A claimed run and the thread's earlier turns it is given (user and assistant messages). */
export interface ClaimedRun {
  run: RunRow
  history: WireMessage[]
}

/**
 * The CTEs that read each claimed run's history (`ctx`, a row per claimed run `cid`: its turns
 * as JSON, how many kept, of how many, how many results shortened), given a `claimed` CTE
 * before them.
 */
function historyCtes(budgetBytes: unknown): SQL {
  const short = sql.raw(String(SHORTENED_RESULT_CHARS))
  return sql`
    -- the thread's earlier succeeded turns and their sizes, stored when each ended (whole, and
    -- with long tool results shortened): measuring the history reads no message. A turn
    -- without a transcript is sent its prompt and answer. Every join below is an index lookup
    -- or on the claimed run's id, among the few runs one statement claims: the plan stays
    -- linear whatever the planner's statistics say (PGlite never gathers any)
    hist as (
      select c.id as cid, h.id, h.prompt, h.output, h.context_bytes is null as bare,
             coalesce(h.context_bytes, octet_length(h.prompt) + octet_length(h.output)) as full_size,
             coalesce(h.context_short_bytes, octet_length(h.prompt) + octet_length(h.output)) as short_size
      from claimed c join runs h on h.org_id = c.org_id and h.root_run_id = c.root_run_id and h.id < c.id
      where h.status = 'succeeded' and h.output is not null and c.suspended is null
    ),
    budget as (select c.id as cid, ${budgetBytes} - octet_length(c.prompt) - coalesce(octet_length(c.instructions), 0) as b from claimed c),
    -- when all do not fit, long tool results are shortened first, then the oldest turns left out whole
    plan as (
      select h.cid, h.id, budget.b, (sum(h.full_size) over (partition by h.cid) > budget.b) as shorten,
             sum(h.short_size) over (partition by h.cid order by h.id desc) as cum_short
      from hist h join budget on budget.cid = h.cid
    ),
    -- the turns kept are the newest ones, from first_id on
    cut as (
      select c.id as cid, coalesce(bool_or(p.shorten), false) as shorten,
             min(p.id) filter (where not p.shorten or p.cum_short <= p.b) as first_id,
             count(p.id) filter (where not p.shorten or p.cum_short <= p.b) as kept
      from claimed c left join plan p on p.cid = c.id
      group by c.id
    ),
    -- only the kept turns' messages are read, each turn's by its primary key; built as json
    -- (text), not jsonb: it is only handed to the client, never queried
    sent as (
      select h.cid, h.id, t.turn, t.shortened
      from hist h join cut on cut.cid = h.cid cross join lateral (
        select json_agg(json_strip_nulls(json_build_object('role', m.role,
                 'content', case when cut.shorten and m.role = 'tool' and char_length(m.content) > ${short}
                   then left(m.content, ${short}) || chr(10) || '[result shortened: ${short} of ' || char_length(m.content) || ' characters]'
                   else m.content end,
                 'toolCalls', m.tool_calls, 'toolCallId', m.tool_call_id, 'name', m.name)) order by m.seq) as turn,
               count(*) filter (where cut.shorten and m.role = 'tool' and char_length(m.content) > ${short}) as shortened
        from run_messages m where m.run_id = h.id) t
      where h.id >= cut.first_id and not h.bare
      union all
      select h.cid, h.id, json_build_array(json_build_object('role', 'user', 'content', h.prompt),
                                           json_build_object('role', 'assistant', 'content', h.output)), 0
      from hist h join cut on cut.cid = h.cid where h.id >= cut.first_id and h.bare
    ),
    ctx as (
      select cut.cid,
             (select coalesce(json_agg(s.turn order by s.id), '[]'::json) from sent s where s.cid = cut.cid and s.turn is not null) as turns,
             cut.kept::int as kept,
             (select count(*) from hist h where h.cid = cut.cid)::int as total,
             (select coalesce(sum(s.shortened), 0) from sent s where s.cid = cut.cid)::int as shortened
      from cut
    )`
}

/** The runs claimNext takes in one statement at most (a worker asks for its free slots, up to this). */
export const MAX_CLAIM = 16

/**
 * One statement (one round trip): take up to `limit` runs nobody else is taking: first
 * those waiting for people whose calls are all decided or whose first approval expired,
 * then queued runs whose thread has no earlier run still queued, running or waiting (runs
 * of one thread run one at a time, in order). Each org's oldest such runs are candidates,
 * and they are taken in turns between the orgs: an org's k-th candidate ranks as if the
 * org had k-1 more runs running, and the fewest running (so counted) go first, the oldest
 * among equals. Taking several runs is taking one, then the next, each time from the org
 * with the fewest runs running: so one org's flood never keeps another org's run waiting
 * for more than the next free worker, and with one org it is plain first-in first-out.
 * The orgs with queued runs are found with a skip scan of runs_org_queued_idx (one probe
 * per org), not by reading their queues; lease them, read each one's thread's earlier
 * succeeded turns that fit in MODEL_CONTEXT_TOKENS (newest kept, oldest dropped whole),
 * and store and announce their `run.started` events with `contextTurns` and
 * `droppedTurns` (and `resumed` when one goes on from where it waited), under the
 * advisory locks of their orgs (taken in hash order, as eventCtes does). `waiting`:
 * whether other runs are queued or due to go on (none runnable now, perhaps: a thread's
 * next run waits for its turn), so the worker knows when looking again can find
 * something.
 */
export async function claimRuns(
  db: Db,
  o: { instanceId: string; leaseMs: number; budgetBytes: number; limit: number }
): Promise<{ claimed: ClaimedRun[]; waiting: boolean }> {
  const rows = await sendClaim(db, claimValues(o))
  const waiting = boolOf(rows[0]!.more_waiting)
  const claimed = rows
    .filter((row) => row.id !== null && row.id !== undefined)
    .map((row) => ({
      run: runFromRow(row),
      history: replayWire(jsonOf<TranscriptMessage[][] | null>(row.context_turns) ?? [])
    }))
  return { claimed, waiting }
}

/** The values of one claim, the parameters of claimStatement. */
export interface ClaimValues {
  limit: number
  instanceId: string
  leaseSeconds: number
  budgetBytes: number
}

/** A claim's values from claimRuns' options (the limit brought within 1…MAX_CLAIM). */
export function claimValues(o: {
  instanceId: string
  leaseMs: number
  budgetBytes: number
  limit: number
}): ClaimValues {
  return {
    limit: Math.max(1, Math.min(MAX_CLAIM, Math.floor(o.limit))),
    instanceId: o.instanceId,
    leaseSeconds: o.leaseMs / 1000,
    budgetBytes: o.budgetBytes
  }
}

/**
 * The claim's text is built by drizzle once (about 8 KB of nested sql`` templates, which
 * built again for every claim cost the main thread a quarter to a third of the CPU a claim
 * costs it: bench/claim-cpu.ts); each claim fills in its values, written into the text as
 * constants (PLAN_EACH_TIME): one round trip.
 */
const claimOnce = builtOnce<ClaimValues>(['limit', 'instanceId', 'leaseSeconds', 'budgetBytes'], claimStatement)

/** Sends the claim for these values (one round trip); the rows as the database answered them. */
export async function sendClaim(db: Db, values: ClaimValues): Promise<Array<Record<string, unknown>>> {
  return rowsOf<Record<string, unknown>>(await claimOnce(db, values))
}

/**
 * The claim statement of claimRuns (see there) for these values: numbers and strings, or
 * drizzle placeholders for the text built once. Each value is a parameter of the statement.
 */
export function claimStatement(v: { [K in keyof ClaimValues]: unknown }): SQL {
  const limit = v.limit
  return sql`${sql.raw(PLAN_EACH_TIME)}
    with recursive queued_orgs(org_id) as (
      (select org_id from runs where status = 'queued' order by org_id limit 1)
      union all
      select (select r.org_id from runs r where r.status = 'queued' and r.org_id > q.org_id order by r.org_id limit 1)
      from queued_orgs q where q.org_id is not null
    ),
    busy as (select org_id, count(*) as n from runs where status = 'running' group by org_id),
    due as materialized (
      select id, resume_at from runs where status = 'requires_action' and resume_at <= now()
      order by resume_at, id limit ${limit}::int for update skip locked
    ),
    heads as materialized (
      select head.id, head.created_at,
             coalesce(busy.n, 0) + row_number() over (partition by q.org_id order by head.created_at, head.id) as turn
      from queued_orgs q
        left join busy on busy.org_id = q.org_id
        cross join lateral (
          -- only a run whose run.queued is stored: it is written just after the run
          -- commits, and a run.started must never come before it
          select id, created_at from runs where status = 'queued' and org_id = q.org_id
            and exists (select 1 from run_events e where e.run_id = runs.id and e.type = 'run.queued')
            and not exists (select 1 from runs b where b.org_id = runs.org_id and b.root_run_id = runs.root_run_id
                              and b.id < runs.id and b.status in ('queued', 'running', 'requires_action'))
          order by created_at, id limit ${limit}::int for update skip locked) head
      where q.org_id is not null
    ),
    picked as materialized (
      select id from (
        select id, 0 as tier, 0::bigint as turn, resume_at as at from due
        union all
        select id, 1, turn, created_at from heads
      ) p
      order by tier, turn, at, id limit ${limit}::int
    ),
    -- started_at is the clock when the row is taken, not now() (the statement's start): the
    -- snapshot that saw the thread's previous run ended may be taken after that start, so
    -- now() could come before the previous run's finished_at
    claimed as (
      update runs set status = 'running', started_at = coalesce(started_at, clock_timestamp()), resume_at = null, lease_owner = ${v.instanceId},
        lease_expires_at = now() + make_interval(secs => ${v.leaseSeconds})
      where id = any(array(select id from picked))
      returning *
    ),
    ${historyCtes(v.budgetBytes)},
    lock as (
      select count(pg_advisory_xact_lock(h)) as n
      from (select distinct hashtext('cairn.run_events:' || org_id) as h from claimed order by h) as s
    ),
    ev as (
      insert into run_events (org_id, run_id, root_run_id, type, data)
      select c.org_id, c.id, c.root_run_id, 'run.started',
             case when c.suspended is null
               then jsonb_build_object('engine', c.engine, 'model', c.model, 'contextTurns', ctx.kept, 'droppedTurns', ctx.total - ctx.kept,
                                       'shortenedResults', ctx.shortened)
               else jsonb_build_object('engine', c.engine, 'model', c.model, 'resumed', true) end
      from claimed c join ctx on ctx.cid = c.id, lock
      order by c.created_at, c.id
      returning id, org_id, run_id, root_run_id, type, data, created_at
    )
    select taken.*, (
             exists (select 1 from runs where status = 'queued' and id not in (select id from claimed))
             or exists (select 1 from runs where status = 'requires_action' and resume_at <= now() and id not in (select id from claimed))
           ) as more_waiting
    from (select claimed.*, ctx.turns as context_turns, ${notifyStored(sql`ev`)}::text as notified
          from claimed join ev on ev.run_id = claimed.id join ctx on ctx.cid = claimed.id) taken
    right join (select 1) as one on true
    order by taken.created_at, taken.id`
}

/** claimRuns for one run: the next run this worker may execute, and whether others wait. */
export async function claimNext(
  db: Db,
  o: { instanceId: string; leaseMs: number; budgetBytes: number }
): Promise<{ claimed: ClaimedRun | null; waiting: boolean }> {
  const { claimed, waiting } = await claimRuns(db, { ...o, limit: 1 })
  return { claimed: claimed[0] ?? null, waiting }
}

/**
 * Extends this worker's leases on the runs it still holds (`running`); which it holds, and which were asked to stop.
 */
export async function renewLeases(
  db: Db,
  instanceId: string,
  leaseMs: number,
  ids: string[]
): Promise<Array<{ id: string; cancel_requested: boolean }>> {
  return rowsOf<{ id: string; cancel_requested: boolean }>(
    await db.execute(sql`
    update runs set lease_expires_at = now() + make_interval(secs => ${leaseMs / 1000})
    where lease_owner = ${instanceId} and status = 'running' and id in (${sql.join(
      ids.map((id) => sql`${id}`),
      sql`, `
    )})
    returning id, cancel_requested`)
  )
}

/**
 * A run this worker holds leaves it to wait for people's decisions, in one
 * transaction: status `requires_action`, its state and the tokens spent so far stored,
 * its lease released, `run.requires_action` naming the pending approvals. When it may go
 * on (`resume_at`): now if every call was decided meanwhile, else when its first pending
 * approval expires (a decision moves it to now: runtime-ports.ts `decided`). The run row
 * is locked first, so a decision committed just before is seen here, and one just after
 * sees the run waiting. Nothing happens when the lease was lost.
 */
export async function suspendRun(
  db: Db,
  run: RunRow,
  instanceId: string,
  state: SuspendedRun,
  spent: { promptTokens: number; completionTokens: number } | null,
  transcript: readonly TranscriptMessage[] = []
): Promise<void> {
  const approvalIds = state.calls.flatMap((c) =>
    c.approvalId !== undefined && c.content === undefined ? [c.approvalId] : []
  )
  await db.transaction(async (tx) => {
    const held = rowsOf(
      await tx.execute(
        sql`select 1 from runs where id = ${run.id} and status = 'running' and lease_owner = ${instanceId} for update`
      )
    )
    if (held.length === 0) return
    // the round that waits is in the transcript: the run goes on from it
    await appendTranscript(tx, run, transcript)
    await tx.execute(sql`
      update runs set status = 'requires_action', suspended = ${JSON.stringify(state)}::jsonb, lease_owner = null, lease_expires_at = null,
        input_tokens = ${spent?.promptTokens ?? null}, output_tokens = ${spent?.completionTokens ?? null},
        resume_at = coalesce((select min(a.expires_at) from tool_approvals a
                              where a.org_id = ${run.orgId} and a.run_id = ${run.id} and a.status = 'pending'), now())
      where id = ${run.id}`)
    await appendEvent(tx, {
      orgId: run.orgId,
      runId: run.id,
      rootRunId: run.rootRunId,
      type: 'run.requires_action',
      data: { approvalIds }
    })
  })
}

/**
 * Gives a run this worker holds back to the queue, its lease released, with a second
 * `run.queued` (`requeued: true`) that wakes every instance's worker and tells a client
 * following the run that its text starts over. With a checkpoint (or the state it waited
 * in, kept) it goes on from there without executing a tool call again.
 */
export async function releaseRun(
  db: Db,
  run: RunRow,
  instanceId: string,
  checkpoint: { state: string; usage: { promptTokens: number; completionTokens: number } | null } | undefined,
  transcript: readonly TranscriptMessage[] = []
): Promise<void> {
  await db.transaction(async (tx) => {
    const [released] = await tx
      .update(runs)
      .set({
        status: 'queued',
        startedAt: null,
        leaseOwner: null,
        leaseExpiresAt: null,
        ...(checkpoint
          ? {
              suspended: sql`${checkpoint.state}::jsonb`,
              inputTokens: checkpoint.usage?.promptTokens ?? null,
              outputTokens: checkpoint.usage?.completionTokens ?? null
            }
          : {})
      })
      .where(and(eq(runs.id, run.id), eq(runs.status, 'running'), eq(runs.leaseOwner, instanceId)))
      .returning({ id: runs.id })
    if (released) await appendTranscript(tx, run, transcript)
    if (released)
      await appendEvent(tx, {
        orgId: run.orgId,
        runId: run.id,
        rootRunId: run.rootRunId,
        type: 'run.queued',
        data: { engine: run.engine, model: run.model, requeued: true }
      })
  })
}

/** How a run ended, as the worker stores it. */
export type RunOutcome =
  | { status: 'succeeded'; facts: string[]; output: string }
  | { status: 'failed'; error: string }
  | { status: 'cancelled' }

/**
 * Stores a held run's end (in the caller's finishing transaction): its status, output or
 * error (a cancelled run keeps why, `interrupted`), the tokens the engine reported whatever
 * the end (fleet usage sums them: usage_hours), its lease and waiting state cleared. False
 * when this worker no longer holds it.
 */
export async function markFinished(
  tx: Tx,
  runId: string,
  instanceId: string,
  outcome: RunOutcome,
  usage: { promptTokens: number; completionTokens: number } | null
): Promise<{ remembered: RememberedFact[] } | null> {
  const [finished] = await tx
    .update(runs)
    .set({
      status: outcome.status,
      error: outcome.status === 'failed' ? outcome.error : outcome.status === 'cancelled' ? sql`${runs.error}` : null,
      output: outcome.status === 'succeeded' ? outcome.output : null,
      finishedAt: sql`now()`,
      ...(usage ? { inputTokens: usage.promptTokens, outputTokens: usage.completionTokens } : {}),
      suspended: null,
      leaseOwner: null,
      leaseExpiresAt: null
    })
    .where(and(eq(runs.id, runId), eq(runs.status, 'running'), eq(runs.leaseOwner, instanceId)))
    .returning({ remembered: runs.remembered })
  return finished ? { remembered: jsonOf<RememberedFact[] | null>(finished.remembered) ?? [] } : null
}

/** A held run's end as finishAll stores it. */
export interface RunEnd {
  run: Pick<RunRow, 'id' | 'orgId' | 'rootRunId'>
  outcome: RunOutcome
  usage: { promptTokens: number; completionTokens: number } | null
  /** the run's transcript, of which the messages from `from` on are not stored yet */
  transcript: { messages: readonly TranscriptMessage[]; from: number }
  /** its last events, its end event last */
  events: NewEvent[]
}

/**
 * A held run's end in ONE statement, committed on its own, for the end that needs nothing
 * else in its transaction (no facts to capture, no follow-up): markFinished's update, the
 * rest of its transcript, and its last events with its end event (eventCtes, gated on the
 * update). One round trip where the transaction took five (BEGIN, three statements,
 * COMMIT); the rules are the transaction's, since a statement is one. Several runs' ends
 * (of any orgs) go in the same statement (FinishBatcher): one round trip, one commit and
 * one take of each org's event lock for all of them, each run's part gated on its own
 * update. A run that kept facts with the `remember` tool is left alone here (they must be
 * captured in the commit that ends it): false, as when this worker no longer holds the
 * run; the caller's transaction then decides which. One answer per end, in order.
 */
export async function finishAll(db: Db, instanceId: string, ends: RunEnd[]): Promise<boolean[]> {
  if (ends.length === 0) return []
  const input = JSON.stringify(
    ends.map(({ run, outcome, usage, transcript }) => ({
      id: run.id,
      org_id: run.orgId,
      root_run_id: run.rootRunId,
      status: outcome.status,
      error: outcome.status === 'failed' ? outcome.error : null,
      output: outcome.status === 'succeeded' ? outcome.output : null,
      input_tokens: usage?.promptTokens ?? null,
      output_tokens: usage?.completionTokens ?? null,
      messages: transcript.messages.slice(transcript.from).map((m, i) => ({
        seq: transcript.from + i,
        role: m.role,
        content: m.content,
        tool_calls: m.toolCalls ?? null,
        tool_call_id: m.toolCallId ?? null,
        name: m.name ?? null
      }))
    }))
  )
  const events = ends.flatMap((e) => e.events)
  const ended = sql`jsonb_to_recordset(${input}::jsonb) as e(id text, org_id text, root_run_id text, status text,
      error text, output text, input_tokens int, output_tokens int, messages jsonb)`
  // a succeeded run's transcript size as its thread's next runs are sent it: the messages stored
  // before this statement and the ones it adds (a statement does not see its own inserts)
  const result = await db.execute(sql`
    with fin as (
      update runs set status = e.status,
        error = case e.status when 'failed' then e.error when 'cancelled' then runs.error end,
        output = e.output, finished_at = now(),
        input_tokens = coalesce(e.input_tokens, runs.input_tokens), output_tokens = coalesce(e.output_tokens, runs.output_tokens),
        suspended = null, lease_owner = null, lease_expires_at = null,
        context_bytes = case when e.status = 'succeeded' then size.full_size else runs.context_bytes end,
        context_short_bytes = case when e.status = 'succeeded' then size.short_size else runs.context_short_bytes end
      from ${ended} cross join lateral (${contextSizes(sql`
          select role, content, tool_calls from run_messages where run_id = e.id
          union all
          select n.role, n.content, n.tool_calls
          from jsonb_to_recordset(e.messages) as n(seq int, role text, content text, tool_calls jsonb)
          where not exists (select 1 from run_messages r where r.run_id = e.id and r.seq = n.seq)`)}) as size(full_size, short_size)
      where runs.id = e.id and runs.status = 'running' and runs.lease_owner = ${instanceId}
        and coalesce(jsonb_array_length(runs.remembered), 0) = 0
      returning runs.id),
    msgs as (
      insert into run_messages (run_id, seq, org_id, root_run_id, role, content, tool_calls, tool_call_id, name)
      select fin.id, m.seq, e.org_id, e.root_run_id, m.role, m.content, m.tool_calls, m.tool_call_id, m.name
      from ${ended} join fin on fin.id = e.id
        cross join lateral jsonb_to_recordset(e.messages)
          as m(seq int, role text, content text, tool_calls jsonb, tool_call_id text, name text)
      on conflict do nothing),
    ${eventCtes(events, sql`fin`, true)}
    select ins.id::text as event_id, ins.run_id, ins.created_at from ins, notified order by ins.id`)
  const rows = rowsOf<{ event_id: string; run_id: string; created_at: Date | string }>(result)
  return ends.map((end) => {
    const own = rows.filter((r) => r.run_id === end.run.id)
    if (own.length === 0) return false
    storedAll(end.events, own)
    return true
  })
}

/** A raw `runs` row (snake_case, from a hand-written statement) as drizzle would return it. */
function runFromRow(r: Record<string, unknown>): RunRow {
  return {
    id: r.id as string,
    orgId: r.org_id as string,
    rootRunId: r.root_run_id as string,
    parentRunId: (r.parent_run_id as string | null) ?? null,
    engine: r.engine as string,
    model: (r.model as string | null) ?? null,
    prompt: r.prompt as string,
    status: r.status as RunRow['status'],
    origin: r.origin as RunRow['origin'],
    error: (r.error as string | null) ?? null,
    metadata: jsonOf<Record<string, unknown> | null>(r.metadata) ?? {},
    secretNames: jsonOf<string[] | null>(r.secret_names) ?? [],
    userId: (r.user_id as string | null) ?? null,
    createdAt: dateOf(r.created_at),
    startedAt: dateOrNull(r.started_at),
    finishedAt: dateOrNull(r.finished_at),
    inputTokens: (r.input_tokens as number | null) ?? null,
    outputTokens: (r.output_tokens as number | null) ?? null,
    contextBytes: (r.context_bytes as number | null) ?? null,
    contextShortBytes: (r.context_short_bytes as number | null) ?? null,
    output: (r.output as string | null) ?? null,
    instructions: (r.instructions as string | null) ?? null,
    settings: jsonOf<RunRow['settings'] | null>(r.settings) ?? {},
    attachments: jsonOf<string[] | null>(r.attachments) ?? [],
    leaseOwner: (r.lease_owner as string | null) ?? null,
    leaseExpiresAt: dateOrNull(r.lease_expires_at),
    cancelRequested: boolOf(r.cancel_requested),
    suspended: jsonOf<RunRow['suspended']>(r.suspended) ?? null,
    resumeAt: dateOrNull(r.resume_at),
    remembered: jsonOf<RunRow['remembered']>(r.remembered) ?? null,
    traceparent: (r.traceparent as string | null) ?? null
  }
}
