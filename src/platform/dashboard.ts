import { sql } from 'drizzle-orm'
import { rowsOf, type Db } from '../db/client.js'
import { isoOf, isoOrNull } from '../db/rows.js'

const RECENT = 10
const TITLE_MAX = 120

/** The smallest UUIDv7 of a moment: run ids at or after it were made at or after it. */
export function uuidv7Floor(at: Date): string {
  const hex = at.getTime().toString(16).padStart(12, '0')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7000-8000-000000000000`
}

const clip = (text: string) => {
  const line = text.replace(/\s+/g, ' ').trim()
  return line.length > TITLE_MAX ? `${line.slice(0, TITLE_MAX - 1)}…` : line
}

/**
 * The org's dashboard, in one statement: finished runs come from the usage rollup
 * (never a scan of runs), live ones from the runs the claim's index holds, the rest are
 * counts of the org's rows; `recent` is the newest 10 changes across six kinds.
 */
export async function dashboard(db: Db, orgId: string, now: Date) {
  const [row] = rowsOf<Record<string, unknown>>(
    await db.execute(sql`
    select
      f.finished, f.succeeded, f.failed,
      (select count(*) from runs where org_id = ${orgId} and status = 'queued') as queued,
      (select count(*) from runs where org_id = ${orgId} and status = 'running') as running,
      (select count(*) from runs where org_id = ${orgId} and status = 'requires_action') as requires_action,
      (select count(*) from runs where org_id = ${orgId} and id >= ${uuidv7Floor(new Date(now.getTime() - 86_400_000))}) as last24h,
      (select coalesce(sum(item_count), 0) from memory_pools where org_id = ${orgId}) as memory_items,
      (select count(*) from memory_captures where org_id = ${orgId} and state = 'pending') as pending_captures,
      (select count(*) from memory_captures where org_id = ${orgId} and state = 'dead') as dead_captures,
      (select count(*) from memory_captures where org_id = ${orgId} and state = 'delivering' and lease_expires_at < now()) as orphans,
      (select count(*) from knowledge_records where org_id = ${orgId}) as records,
      (select count(*) from knowledge_documents where org_id = ${orgId}) as documents,
      (select count(*) from automations where org_id = ${orgId} and enabled) as automations_enabled,
      (select min(next_fire_at) from automations where org_id = ${orgId} and enabled) as next_fire_at,
      (select coalesce(json_agg(r order by r.at desc, r.id desc), '[]'::json) from (
        select * from (
          (select 'run' as kind, id, prompt as title, created_at as at from runs where org_id = ${orgId} order by id desc limit ${RECENT})
          union all
          (select 'record', id, title, updated_at from knowledge_records where org_id = ${orgId} order by updated_at desc limit ${RECENT})
          union all
          (select 'document', id, name, created_at from knowledge_documents where org_id = ${orgId} order by created_at desc limit ${RECENT})
          union all
          (select 'artifact', id, name, updated_at from artifacts where org_id = ${orgId} order by updated_at desc limit ${RECENT})
          union all
          (select 'skill', id, name, updated_at from skills where org_id = ${orgId} order by updated_at desc limit ${RECENT})
          union all
          (select 'task', id, title, updated_at from tasks where org_id = ${orgId} order by updated_at desc limit ${RECENT})
        ) everything order by at desc, id desc limit ${RECENT}) r) as recent
    from (select coalesce(sum(runs), 0) as finished, coalesce(sum(succeeded), 0) as succeeded, coalesce(sum(failed), 0) as failed
          from usage_hours where org_id = ${orgId}) f`)
  )
  const n = (key: string) => Number(row![key])
  const finished = n('finished')
  const byStatus = {
    queued: n('queued'),
    running: n('running'),
    requires_action: n('requires_action'),
    succeeded: n('succeeded'),
    failed: n('failed'),
    cancelled: finished - n('succeeded') - n('failed')
  }
  const recent = (typeof row!.recent === 'string' ? JSON.parse(row!.recent) : row!.recent) as Array<{
    kind: string
    id: string
    title: string
    at: string
  }>
  return {
    runs: {
      total: finished + byStatus.queued + byStatus.running + byStatus.requires_action,
      byStatus,
      last24h: n('last24h')
    },
    activeRuns: byStatus.queued + byStatus.running + byStatus.requires_action,
    memory: {
      items: n('memory_items'),
      pendingCaptures: n('pending_captures'),
      deadCaptures: n('dead_captures'),
      orphans: n('orphans')
    },
    knowledge: { records: n('records'), documents: n('documents') },
    automations: {
      enabled: n('automations_enabled'),
      nextFireAt: isoOrNull(row!.next_fire_at as string | Date | null)
    },
    recent: recent.map((r) => ({ kind: r.kind as 'run', id: r.id, title: clip(r.title), at: isoOf(r.at) }))
  }
}
