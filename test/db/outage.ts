import postgres from 'postgres'
import type { Database } from '../../src/db/client.js'
import type { Teardown, TestDatabase } from '../helper.js'
import { waitFor } from '../helper.js'

/**
 * A database outage for a test, the same on both databases: while it lasts, every new
 * query and transaction of `database` fails as postgres.js fails when the server is gone
 * (`CONNECTION_CLOSED`). On real Postgres (`url`), the outage also terminates the
 * database's connections when it begins, so the statements in flight fail the way a
 * restart fails them (57P01) and the pool reconnects afterwards.
 *
 * It sits where drizzle hands queries to postgres.js (its session's client), which both
 * databases use: the service's own code runs unchanged.
 */
export function databaseOutage(t: Teardown, database: Database, url?: string) {
  const session = (database.db as unknown as { session: { client: postgres.Sql } }).session
  const client = session.client
  let down = false
  const gone = () =>
    Object.assign(new Error('write CONNECTION_CLOSED 127.0.0.1:5432 (test outage)'), { code: 'CONNECTION_CLOSED' })
  // a query as drizzle uses one: awaited, or asked for `.values()`
  const failing = () => ({
    then: (ok: (v: never) => unknown, ko: (e: unknown) => unknown) => Promise.reject(gone()).then(ok, ko),
    values: () => Promise.reject(gone())
  })
  session.client = new Proxy(client, {
    get(target, property, receiver) {
      if (down && property === 'unsafe') return failing
      if (down && property === 'begin') return () => Promise.reject(gone())
      return Reflect.get(target, property, receiver) as unknown
    }
  })
  t.teardown(() => {
    session.client = client
  })
  return {
    async begin(): Promise<void> {
      down = true
      if (!url) return
      const admin = postgres(url, { max: 1, onnotice: () => {} })
      try {
        await admin`select pg_terminate_backend(pid) from pg_stat_activity
                    where datname = current_database() and pid <> pg_backend_pid() and application_name = 'cairn'`
      } finally {
        await admin.end()
      }
    },
    end(): void {
      down = false
    }
  }
}

/**
 * Holds `table` in SHARE mode from a connection of the test's own, so the service's next
 * write to it waits: a write in flight, for a test to cut the database under. `release()`
 * ends the hold. Postgres only.
 */
export async function holdWrites(t: Teardown, direct: TestDatabase, table: string) {
  const sql = postgres(direct.url!, { max: 2, onnotice: () => {} })
  t.teardown(() => sql.end({ timeout: 1 }))
  let release!: () => void
  const released = new Promise<void>((resolve) => (release = resolve))
  let held!: () => void
  const holding = new Promise<void>((resolve) => (held = resolve))
  const done = sql
    .begin(async (tx) => {
      await tx.unsafe(`lock table ${table} in share mode`)
      held()
      await released
    })
    .catch(() => {})
  await holding
  return {
    /** resolves once a statement of the service waits on the hold */
    async blocked() {
      await waitFor(`a write waiting on ${table}`, async () => {
        const [row] = await sql`select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and application_name = 'cairn'`
        return (row!.n as number) > 0
      })
    },
    async release() {
      release()
      await done
    }
  }
}
