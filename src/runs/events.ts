import { sql, type SQL } from 'drizzle-orm'
import { EVENTS_CHANNEL, type BusEvent } from '../../plugins/event-bus.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import type { RunEventSink } from './ports/memory.js'
import { isoOf, jsonOf } from '../db/rows.js'
import { GroupCommit } from '../db/group-commit.js'

/** The event types a run can produce. */
export const EVENT_TYPES = [
  'run.queued',
  'run.started',
  'message.delta',
  'message.completed',
  'tool.call',
  'tool.result',
  'memory.recalled',
  'memory.captured',
  'artifact.created',
  'run.requires_action',
  'run.succeeded',
  'run.failed',
  'run.cancelled'
] as const
export const TERMINAL_EVENTS = new Set(['run.succeeded', 'run.failed', 'run.cancelled'])
/** token deltas are not "changes" of a run; the change stream skips them */
export const isChange = (type: string) => type !== 'message.delta'

/** NOTIFY payloads are limited to 8000 bytes; larger data is loaded by the reader. */
const NOTIFY_DATA_LIMIT = 7000

/**
 * The NOTIFY that announces a stored event, from the columns of its `run_events` row
 * (`from` names the row source: a CTE or alias with id, org_id, run_id, root_run_id,
 * type, data, created_at). The one payload shape every writer sends (plugins/event-bus.ts
 * reads it): the data inline when small, else `big: true` and the reader loads it.
 */
export function notifyStored(from: SQL): SQL {
  const c = (column: string) => sql`${from}.${sql.identifier(column)}`
  return sql`pg_notify(${EVENTS_CHANNEL}, json_build_object(
    'id', ${c('id')}::text, 'orgId', ${c('org_id')}, 'runId', ${c('run_id')}, 'rootRunId', ${c('root_run_id')}, 'type', ${c('type')},
    'createdAt', ${c('created_at')},
    'data', case when octet_length(${c('data')}::text) <= ${NOTIFY_DATA_LIMIT} then ${c('data')} else null end,
    'big', octet_length(${c('data')}::text) > ${NOTIFY_DATA_LIMIT}
  )::text)`
}

export interface NewEvent {
  orgId: string
  runId: string
  rootRunId: string
  type: string
  data?: Record<string, unknown>
}

/**
 * Stores one run event and announces it, in one statement, inside the caller's transaction
 * (or as its own when given the database): the NOTIFY is delivered only if it commits.
 * The per-org advisory lock, held to commit, makes ids commit in increasing order within
 * an org, so a reader that has seen id N never later sees a smaller id appear (resume by
 * Last-Event-ID loses nothing). The commit is durable (`synchronous_commit` as the server
 * has it, on by default): Postgres delivers the NOTIFY, and shows the row to readers,
 * only once the commit is flushed, so no client is ever shown an event that a crash then
 * erases. Event writes outside a transaction share their flushes (EventBatcher).
 */
export async function appendEvent(tx: Tx | Db, event: NewEvent): Promise<BusEvent> {
  const result = await tx.execute(sql`
    with lock as (select pg_advisory_xact_lock(hashtext(${'cairn.run_events:' + event.orgId}))),
    ins as (
      insert into run_events (org_id, run_id, root_run_id, type, data)
      select ${event.orgId}, ${event.runId}, ${event.rootRunId}, ${event.type}, ${JSON.stringify(event.data ?? {})}::jsonb from lock
      returning id, org_id, run_id, root_run_id, type, data, created_at
    )
    select id::text as id, created_at, ${notifyStored(sql`ins`)}::text as notified from ins`)
  const row = rowsOf<{ id: string; created_at: Date | string }>(result)[0]!
  return stored(event, row.id, row.created_at)
}

/** The event as the bus carries it, once the database gave it its id and time. */
function stored(event: NewEvent, id: string, createdAt: Date | string): BusEvent {
  return {
    id: Number(id),
    orgId: event.orgId,
    runId: event.runId,
    rootRunId: event.rootRunId,
    type: event.type,
    data: event.data ?? {},
    createdAt: isoOf(createdAt)
  }
}

/** How many events one batched statement may carry. */
const MAX_BATCH = 256

/**
 * Group commit for events written outside a caller's transaction (`run.queued` at
 * dispatch, everything a running engine emits). While one batch statement is in flight,
 * new events queue; when it returns, the queue goes as the next statement. Idle, an event
 * costs one statement as before; under load, a round trip and a commit are shared by every
 * event that arrived meanwhile. The rules are appendEvent's: the per-org advisory locks
 * (taken in hash order, so two batches never deadlock) are held to commit and every id is
 * drawn under them, so ids still commit in increasing order within an org; the commit is
 * durable, one flush for the whole batch; NOTIFYs go out in id order. A caller's promise settles when its event is
 * stored. Events of one run keep their order because its emitter awaits each one.
 */
export class EventBatcher {
  private readonly writes: GroupCommit<NewEvent, BusEvent>

  constructor(db: Db) {
    this.writes = new GroupCommit({
      max: MAX_BATCH,
      many: (events) => insertEvents(db, events),
      one: (event) => appendEvent(db, event)
    })
  }

  append(event: NewEvent): Promise<BusEvent> {
    return this.writes.add(event)
  }

  /** Several events of one writer, in one batch (so in one statement, when they fit), in order. */
  appendAll(events: NewEvent[]): Promise<BusEvent[]> {
    return this.writes.addAll(events)
  }
}

/**
 * An event's data travels inside a statement's shared NOTIFY when its JSON is at most this
 * long; a larger one is announced with `big: true` and its readers load it.
 */
const BATCH_DATA_LIMIT = 3500
/**
 * One NOTIFY carries the events whose running size ends in the same stretch of this many
 * bytes: a stretch's events add up to less than twice this (each one, its data at most
 * BATCH_DATA_LIMIT, is under this), below the 8000 bytes a payload may hold.
 */
const BATCH_NOTIFY_BYTES = 3900

/**
 * The CTEs (`input`, `locks`, `ins`, `notified`) that store several events and announce
 * them within one statement, under appendEvent's rules: the per-org advisory locks (taken
 * in hash order, so two writers never deadlock) are held to commit and every id is drawn
 * under them; ids follow the list's order. The announcements are one NOTIFY per statement
 * (a JSON array of the events, in id order), not one per event: a session LISTENing pays
 * for every notification the server queues, and a run's events come several to a statement.
 * Only a batch too big for one payload is split, in id order. With `after`, the name of a
 * CTE of the same statement: the events are stored only when it yields a row (and after it
 * ran: its row locks come before the org's advisory lock, as in a transaction that updates
 * the run first). With `byRun`, that CTE yields run ids (`id`), and each event is stored only when its run's id is
 * among them (several runs ended by one statement). The statement must select from `ins` cross joined with
 * `notified`.
 */
export function eventCtes(events: NewEvent[], after?: SQL, byRun = false): SQL {
  const input = JSON.stringify(
    events.map((e) => ({ o: e.orgId, r: e.runId, t: e.rootRunId, y: e.type, d: JSON.stringify(e.data ?? {}) }))
  )
  const gate = !after ? sql`` : byRun ? sql` where run_id in (select id from ${after})` : sql`, ${after}`
  return sql`input as (
      select e.value->>'o' as org_id, e.value->>'r' as run_id, e.value->>'t' as root_run_id, e.value->>'y' as type,
             (e.value->>'d')::jsonb as data, e.ord
      from jsonb_array_elements(${input}::jsonb) with ordinality as e(value, ord)),
    locks as (
      select count(pg_advisory_xact_lock(h)) as n
      from (select distinct hashtext('cairn.run_events:' || org_id) as h from input${gate} order by h) as s),
    ins as (
      insert into run_events (org_id, run_id, root_run_id, type, data)
      select org_id, run_id, root_run_id, type, data from input${byRun ? sql`` : gate}, locks${byRun ? gate : sql``} order by ord
      returning id, org_id, run_id, root_run_id, type, data, created_at),
    payloads as (
      select id, json_build_object(
        'id', id::text, 'orgId', org_id, 'runId', run_id, 'rootRunId', root_run_id, 'type', type, 'createdAt', created_at,
        'data', case when octet_length(data::text) <= ${BATCH_DATA_LIMIT} then data else null end,
        'big', octet_length(data::text) > ${BATCH_DATA_LIMIT}) as p
      from ins),
    chunks as (
      select id, p, (sum(octet_length(p::text)) over (order by id) - 1) / ${BATCH_NOTIFY_BYTES} as chunk from payloads),
    notified as (
      select count(pg_notify(${EVENTS_CHANNEL}, c.payload)) as n
      from (select chunk, json_agg(p order by id)::text as payload from chunks group by chunk order by chunk) as c)`
}

/**
 * Stores several events and announces them, in one statement, inside the caller's
 * transaction (or as its own when given the database): eventCtes. The events as the bus
 * carries them, in the list's order.
 */
export async function insertEvents(tx: Tx | Db, events: NewEvent[]): Promise<BusEvent[]> {
  if (events.length === 0) return []
  const result = await tx.execute(sql`
    with ${eventCtes(events)}
    select ins.id::text as event_id, ins.created_at from ins, notified order by ins.id`)
  return storedAll(events, rowsOf<{ event_id: string; created_at: Date | string }>(result))
}

/** The events of a batch as the bus carries them, from the rows of `ins` in id order (the list's order). */
export function storedAll(
  events: NewEvent[],
  rows: Array<{ event_id: string; created_at: Date | string }>
): BusEvent[] {
  if (rows.length !== events.length) throw new Error(`event batch stored ${rows.length} of ${events.length} events`)
  return events.map((e, i) => stored(e, rows[i]!.event_id, rows[i]!.created_at))
}

export interface EventFilter {
  orgId: string
  runId?: string
  rootRunId?: string
  afterId: number
  /** skip token deltas (the change stream) */
  changesOnly?: boolean
  limit: number
}

interface EventRow {
  id: string | number
  org_id: string
  run_id: string
  root_run_id: string
  type: string
  data: Record<string, unknown> | string
  created_at: Date | string
}

/** Stored events after an id, oldest first: the replay half of every stream. */
export async function listEventsAfter(db: Db, f: EventFilter): Promise<BusEvent[]> {
  const result = await db.execute(sql`
    select id, org_id, run_id, root_run_id, type, data, created_at from run_events
    where org_id = ${f.orgId} and id > ${f.afterId}
      ${f.runId !== undefined ? sql`and run_id = ${f.runId}` : sql``}
      ${f.rootRunId !== undefined ? sql`and root_run_id = ${f.rootRunId}` : sql``}
      ${f.changesOnly ? sql`and type <> 'message.delta'` : sql``}
    order by id limit ${f.limit}`)
  return rowsOf<EventRow>(result).map(fromRow)
}

/** The newest stored event of a run (id and type), or null when it has none (never, or pruned). */
export async function lastEventOf(db: Db, orgId: string, runId: string): Promise<{ id: number; type: string } | null> {
  const result = await db.execute(sql`
    select id, type from run_events where run_id = ${runId} and org_id = ${orgId} order by id desc limit 1`)
  const row = rowsOf<{ id: string | number; type: string }>(result)[0]
  return row ? { id: Number(row.id), type: row.type } : null
}

export async function loadEventData(db: Db, orgId: string, id: number): Promise<Record<string, unknown>> {
  const result = await db.execute(sql`select data from run_events where org_id = ${orgId} and id = ${id}`)
  const row = rowsOf<{ data: Record<string, unknown> | string }>(result)[0]
  if (!row) return {}
  return jsonOf<Record<string, unknown>>(row.data)
}

function fromRow(row: EventRow): BusEvent {
  return {
    id: Number(row.id),
    orgId: row.org_id,
    runId: row.run_id,
    rootRunId: row.root_run_id,
    type: row.type,
    data: jsonOf<Record<string, unknown>>(row.data),
    createdAt: isoOf(row.created_at)
  }
}

/** Deletes events stored before `before` (the retention window's start); returns how many went. */
export async function pruneEvents(db: Db, before: Date): Promise<number> {
  const result = await db.execute(sql`
    with gone as (delete from run_events where created_at < ${before.toISOString()}::timestamptz returning 1)
    select count(*)::int as n from gone`)
  return rowsOf<{ n: number }>(result)[0]?.n ?? 0
}

/**
 * The RunEventSink the memory side calls when a capture is delivered: stores a
 * `memory.captured` (or other) event for the run in its own transaction and publishes it.
 */
export function createRunEventSink(db: Db): RunEventSink {
  return {
    async emit(event) {
      await db.transaction(async (tx) => {
        const rows = rowsOf<{ root_run_id: string }>(
          await tx.execute(sql`select root_run_id from runs where org_id = ${event.orgId} and id = ${event.runId}`)
        )
        const run = rows[0]
        if (!run) throw new Error(`run ${event.runId} not found in org ${event.orgId}`)
        await appendEvent(tx, {
          orgId: event.orgId,
          runId: event.runId,
          rootRunId: run.root_run_id,
          type: event.type,
          data: event.data
        })
      })
    }
  }
}
