// The embedded database's autovacuum. PGlite runs Postgres as one session with no
// background processes, so nothing vacuums or analyzes its tables: a table that was never
// analyzed has no statistics at all, and the planner's guesses for it stay those of an
// empty table however much it holds (memory search at 100,000 facts took 160–460 ms
// instead of 5–9). This does what autovacuum would, with its own thresholds and settings:
// every pass flushes the table counters, then vacuums and analyzes the tables past them.
import { sql } from 'drizzle-orm'
import { createWorkerLoop } from '../worker-loop.js'
import { rowsOf, type Db } from './client.js'

export interface MaintenanceStep {
  table: string
  vacuum: boolean
  analyze: boolean
}

/**
 * The tables autovacuum would take now, with its formula: vacuum when dead rows exceed
 * `autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor × rows`, or rows inserted
 * since the last vacuum exceed the insert threshold and scale factor (that keeps the
 * visibility map current for an append-mostly table); analyze when rows changed since the
 * last analyze exceed `autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × rows`.
 * A table never analyzed that holds pages is analyzed too: its counters may have been lost
 * with a crash, its missing statistics are not.
 */
async function due(db: Db): Promise<MaintenanceStep[]> {
  // the counters reach the views when the session next reports them: make it the next statement
  await db.execute(sql`select pg_stat_force_next_flush()`)
  const rows = rowsOf<{ name: string; vacuum: boolean; analyze: boolean }>(
    await db.execute(sql`
    with settings as (
      select current_setting('autovacuum_vacuum_threshold')::float8 as vt,
             current_setting('autovacuum_vacuum_scale_factor')::float8 as vs,
             current_setting('autovacuum_vacuum_insert_threshold')::float8 as it,
             current_setting('autovacuum_vacuum_insert_scale_factor')::float8 as "is",
             current_setting('autovacuum_analyze_threshold')::float8 as at,
             current_setting('autovacuum_analyze_scale_factor')::float8 as "as"),
    tables as (
      select format('%I.%I', s.schemaname, s.relname) as name, greatest(c.reltuples, 0) as n,
             c.reltuples < 0 and pg_relation_size(c.oid) > 0 as never,
             s.n_dead_tup, s.n_ins_since_vacuum, s.n_mod_since_analyze
      from pg_stat_user_tables s join pg_class c on c.oid = s.relid
      where c.relpersistence = 'p')
    select t.name,
           t.n_dead_tup > vt + vs * t.n or (it >= 0 and t.n_ins_since_vacuum > it + "is" * t.n) as vacuum,
           t.never or t.n_mod_since_analyze > at + "as" * t.n as analyze
    from tables t, settings
    order by t.name`)
  )
  return rows
    .map((r) => ({
      table: r.name,
      vacuum: r.vacuum === true || String(r.vacuum) === 't',
      analyze: r.analyze === true || String(r.analyze) === 't'
    }))
    .filter((s) => s.vacuum || s.analyze)
}

/** One pass: what autovacuum would do now, a table at a time (each one statement). */
export async function maintainEmbedded(db: Db): Promise<MaintenanceStep[]> {
  const steps = await due(db)
  for (const step of steps) {
    const command = step.vacuum ? (step.analyze ? 'vacuum (analyze)' : 'vacuum') : 'analyze'
    // the name is the catalog's, quoted by format('%I.%I')
    await db.execute(sql.raw(`${command} ${step.table}`))
  }
  return steps
}

export interface MaintenanceLoop {
  /** stops the timer and waits for a pass under way */
  stop(): Promise<void>
}

/** A pass every `everyMs` (a worker loop's job: the timer does not keep the process alive; passes never overlap). */
export function startMaintenance(
  db: Db,
  everyMs: number,
  log: { debug(o: object, m: string): void; warn(o: object, m: string): void }
): MaintenanceLoop {
  const pass = async () => {
    const started = performance.now()
    const steps = await maintainEmbedded(db)
    if (steps.length > 0)
      log.debug({ steps, ms: Math.round(performance.now() - started) }, 'embedded database: vacuumed and analyzed')
  }
  const loop = createWorkerLoop<never>({
    name: 'embedded database maintenance',
    log,
    pollMs: everyMs,
    every: [{ everyMs, job: pass }]
  })
  loop.start()
  return {
    async stop() {
      await loop.stop()
    }
  }
}
