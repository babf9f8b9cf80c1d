import { AsyncLocalStorage } from 'node:async_hooks'
import { mkdirSync } from 'node:fs'
import { resolve } from 'node:path'
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import postgres, { type Sql } from 'postgres'
import { lockDataDir } from './data-dir-lock.js'
import { PgliteThread } from './pglite-thread.js'
import * as schema from './schema.js'

export type Schema = typeof schema
/** The drizzle API, the same over postgres.js and PGlite. */
export type Db = PgDatabase<PgQueryResultHKT, Schema>

export interface Database {
  readonly kind: 'postgres' | 'pglite'
  readonly db: Db
  /**
   * LISTEN on `channel`: `fn` gets each payload. `onListen` runs after every (re)LISTEN,
   * the first included: after a reconnect, whatever was sent meanwhile is lost. Resolves
   * to the UNLISTEN.
   */
  listen(channel: string, fn: (payload: string) => void, onListen?: () => void): Promise<() => Promise<void>>
  /** a trivial round trip, for readiness checks */
  ping(): Promise<void>
  /** the pool's connections now: open, carrying a query, and the most it opens (GET /metrics) */
  connections(): PoolConnections
  /**
   * Calls `fn` with every statement sent from now on (BEGIN and COMMIT included): each is one
   * round trip to the server. For tests and benches that count what a piece of work costs;
   * while any listener is set, every query also keeps its caller's stack (postgres.js debug).
   * Returns the unsubscribe.
   */
  onStatement(fn: (query: string, parameters: readonly unknown[]) => void): () => void
  close(): Promise<void>
}

export interface PoolConnections {
  open: number
  inUse: number
  max: number
}

/**
 * postgres.js's `debug` hook, switched on only while someone listens: the connections read it
 * from the shared options at each statement.
 */
type StatementListener = (query: string, parameters: readonly unknown[]) => void

function statementTap(pg: Sql): (fn: StatementListener) => () => void {
  const listeners = new Set<StatementListener>()
  const options = (pg as unknown as { options: { debug?: unknown } }).options
  return (fn) => {
    listeners.add(fn)
    options.debug = (_connection: number, query: string, parameters: readonly unknown[]) => {
      for (const listener of listeners) listener(query, parameters ?? [])
    }
    return () => {
      listeners.delete(fn)
      if (listeners.size === 0) options.debug = false
    }
  }
}

/** postgres.js's pool counts (patches/postgres+*.patch exposes them; the queues themselves are private). */
const connectionsOf = (pg: Sql): PoolConnections => (pg as unknown as { connections: PoolConnections }).connections

export interface OpenDatabaseOptions {
  /** postgres://… for real Postgres; otherwise PGlite */
  url?: string | undefined
  /** PGlite data directory, or `memory://` for a throwaway in-memory database */
  dataDir?: string
  /**
   * A fresh embedded database starts from this data directory dump (a tar made by PGlite's
   * `dumpDataDir`) instead of the empty template: the tests' already migrated schema
   */
  template?: string
  poolMax?: number
}

export async function openDatabase(options: OpenDatabaseOptions): Promise<Database> {
  if (options.url) return openPostgres(options.url, options.poolMax ?? 20)
  return openPglite(options.dataDir ?? './data', options.template)
}

/** longest pause between reconnect attempts, in seconds */
const RECONNECT_MAX_S = 1
/** readiness answers within a second even when connecting hangs */
const PING_TIMEOUT_MS = 800

/** Rejects with a database-unavailable error when `work` takes longer than `ms`. */
/** The work, or a CONNECT_TIMEOUT error (a database that did not answer) after `ms`. */
export async function withinTime<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(Object.assign(new Error('the database did not answer in time'), { code: 'CONNECT_TIMEOUT' })),
      ms
    )
  })
  // the abandoned query still settles later; nobody waits for it
  work.catch(() => {})
  try {
    return await Promise.race([work, late])
  } finally {
    clearTimeout(timer)
  }
}

function openPostgres(url: string, max: number): Database {
  const pg = postgres(url, {
    max,
    onnotice: () => {},
    // fail fast when the server is gone instead of queueing forever
    connect_timeout: 10,
    idle_timeout: 60,
    // postgres.js waits up to 20 s between attempts after a few failed ones (3^n / 100 s):
    // a restarted database would sit unused that long. Capped, the pool and LISTEN are
    // back within a second of the server.
    backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, RECONNECT_MAX_S) * (0.5 + Math.random() / 2),
    // JIT compilation pays off for long analytical queries, never for ours: the run claim's
    // estimate (a lateral probe per org with queued runs) passes jit_above_cost once a queue
    // holds thousands of runs, and each claim then spent 80 ms compiling (bench completion)
    connection: { application_name: 'cairn', jit: 'off' }
  })
  const db = drizzlePostgres({ client: preparedStatements(pg), schema }) as unknown as Db
  return {
    kind: 'postgres',
    db,
    async listen(channel, fn, onListen) {
      const subscription = await pg.listen(channel, fn, onListen)
      return () => subscription.unlisten()
    },
    async ping() {
      await withinTime(pg`select 1`, PING_TIMEOUT_MS)
    },
    connections: () => connectionsOf(pg),
    onStatement: statementTap(pg),
    async close() {
      await pg.end({ timeout: 5 })
    }
  }
}

/**
 * A statement whose text starts with this comment is planned at each execution, not
 * prepared: a statement prepared while its tables were small keeps, after five runs, the
 * generic plan of small tables (sequential scans) until they are analyzed again, and a
 * busy instance grows its queue tables faster than analyze follows (on PGlite, only the
 * embedded maintenance analyzes). For the few statements whose plan depends on how much
 * the tables hold, like the run claim; a plan costs a little, a stale one costs scans.
 * Over postgres.js its parameters are sent as constants of its text (withConstants), so its
 * text must spell `$n` nowhere but for its parameters.
 */
export const PLAN_EACH_TIME = '/* planned each time */'

/**
 * A value as a constant of the statement's text, or undefined when it has no plain spelling
 * (then it stays a parameter). Strings are quoted as libpq's PQescapeLiteral quotes them:
 * quotes doubled and, when there is a backslash, an E'' string with backslashes doubled, which
 * reads the same whatever the server's standard_conforming_strings says.
 */
function constantOf(value: unknown): string | undefined {
  if (value === null || value === undefined) return 'null'
  if (typeof value === 'boolean') return String(value)
  if (typeof value === 'number') return Number.isFinite(value) ? `(${String(value)})` : undefined
  if (typeof value !== 'string' || value.includes('\0')) return undefined
  const quoted = value.replace(/'/g, "''")
  return value.includes('\\') ? `(E'${quoted.replace(/\\/g, '\\\\')}')` : `('${quoted}')`
}

/**
 * A statement planned each time, with its parameters written into its text as constants,
 * when each has a plain spelling: postgres.js sends an unprepared statement with parameters
 * in two round trips (Parse and Describe, a wait for the parameters' types, then Bind and
 * Execute), one without in one. The planner sees the same values either way.
 */
export function withConstants(query: string, parameters: readonly unknown[]): { query: string; parameters: unknown[] } {
  const constants = parameters.map(constantOf)
  if (constants.some((c) => c === undefined)) return { query, parameters: [...parameters] }
  return { query: query.replace(/\$(\d+)/g, (_, n: string) => constants[Number(n) - 1]!), parameters: [] }
}

/**
 * The postgres.js client as drizzle should see it: every query a named prepared statement.
 * Drizzle runs its queries through `unsafe(…, { prepare: false })` unless they were given a
 * name, and postgres.js then sends each query with parameters twice over: Parse and
 * Describe (to learn the parameter types), a wait for the answer, then Bind and Execute;
 * and Postgres parses and plans it from scratch every time. Prepared, a query is parsed and
 * described once per connection and costs one round trip afterwards; about half the
 * database time of a short statement (bench/runs.ts). The same holds inside transactions
 * and savepoints, whose clients are wrapped the same way.
 */
function preparedStatements<T extends Sql>(client: T, oneConnection?: TransactionWatch): T {
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (query: string, parameters?: unknown[], options?: Record<string, unknown>) => {
          oneConnection?.refuseInside()
          if (!query.startsWith(PLAN_EACH_TIME) || !parameters?.length)
            return target.unsafe(query, parameters as never, { ...options, prepare: !query.startsWith(PLAN_EACH_TIME) })
          const sent = withConstants(query, parameters)
          return target.unsafe(sent.query, sent.parameters as never, { ...options, prepare: false })
        }
      }
      if (property === 'begin' || property === 'savepoint') {
        const open = Reflect.get(target, property, receiver) as (...args: unknown[]) => Promise<unknown>
        return (...args: unknown[]) => {
          oneConnection?.refuseInside()
          const wrap = (fn: (c: Sql) => unknown) => (inner: Sql) => fn(preparedStatements(inner))
          if (!oneConnection)
            return open.apply(
              target,
              args.map((arg) => (typeof arg === 'function' ? wrap(arg as (c: Sql) => unknown) : arg))
            )
          const transaction = { open: true }
          const done = open.apply(
            target,
            args.map((arg) =>
              typeof arg === 'function'
                ? (inner: Sql) => oneConnection.scope.run(transaction, () => wrap(arg as (c: Sql) => unknown)(inner))
                : arg
            )
          )
          // registered before the caller's own await, so code after the transaction is outside it
          done.then(
            () => (transaction.open = false),
            () => (transaction.open = false)
          )
          return done
        }
      }
      return Reflect.get(target, property, receiver)
    }
  })
}

/**
 * Where the pool has one connection (the embedded database), a query on `db` awaited inside
 * `db.transaction(async (tx) => …)` waits for the connection the transaction holds, and the
 * transaction waits for it: the process hangs without a word. The transaction's callback
 * runs in an async scope of its own, so such a query is recognised when it is made and
 * refused at once, naming the mistake. Queries of other requests (other scopes) wait their
 * turn as usual.
 */
export class TransactionWatch {
  readonly scope = new AsyncLocalStorage<{ open: boolean }>()

  refuseInside(): void {
    if (this.scope.getStore()?.open !== true) return
    throw new Error(
      "a query on `db` inside `db.transaction()`: the transaction holds the embedded database's only " +
        "connection, so this query would wait for it forever. Use the transaction's `tx` for every query inside it."
    )
  }
}

/**
 * The embedded database: PGlite in its own thread (src/db/pglite-thread.ts), reached by
 * postgres.js through one connection, as a real server is. The data directory is locked
 * before PGlite reads a byte: a second process on it stops here.
 */
async function openPglite(dataDir: string, template?: string): Promise<Database> {
  let location = dataDir
  let lock: { release(): void } | null = null
  if (!dataDir.startsWith('memory://')) {
    const dir = resolve(dataDir)
    mkdirSync(dir, { recursive: true })
    lock = lockDataDir(dir)
    location = resolve(dir, 'pglite')
    mkdirSync(location, { recursive: true })
  }
  let thread: PgliteThread
  try {
    thread = await PgliteThread.start(location, undefined, template)
  } catch (err) {
    lock?.release()
    throw err
  }
  const options = {
    // PGlite has one session: one connection, kept for the life of the service
    max: 1,
    idle_timeout: 0,
    max_lifetime: 0,
    // statements of one tick travel (and run) together; more may wait behind them
    max_pipeline: 1000,
    socket: () => thread.socket(),
    username: 'postgres',
    database: 'postgres',
    onnotice: () => {}
  }
  // max_pipeline is a postgres.js option its types leave out
  const pg = postgres(options as postgres.Options<Record<string, never>>)
  const db = drizzlePostgres({ client: preparedStatements(pg, new TransactionWatch()), schema }) as unknown as Db
  return {
    kind: 'pglite',
    db,
    async listen(channel, fn, onListen) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`not a channel name: ${channel}`)
      const listener = thread.onNotification(channel, fn)
      if (listener.first) await pg.unsafe(`listen ${channel}`)
      onListen?.()
      return async () => {
        if (listener.stop()) await pg.unsafe(`unlisten ${channel}`).catch(() => {})
      }
    },
    async ping() {
      await withinTime(pg`select 1`, PING_TIMEOUT_MS)
    },
    connections: () => connectionsOf(pg as unknown as Sql),
    onStatement: statementTap(pg as unknown as Sql),
    async close() {
      try {
        await pg.end({ timeout: 5 })
        await thread.close()
      } finally {
        lock?.release()
      }
    }
  }
}

/** Rows of a `db.execute` result, whichever driver produced it. */
export function rowsOf<T>(result: unknown): T[] {
  if (Array.isArray(result)) return result as T[]
  return ((result as { rows?: T[] }).rows ?? []) as T[]
}

/** A drizzle transaction, as passed to `db.transaction(async (tx) => …)`. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0]
