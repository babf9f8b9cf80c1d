import { sql, type Placeholder, type Query, type SQL } from 'drizzle-orm'
import { PgDialect } from 'drizzle-orm/pg-core'
import type { Db, Tx } from './client.js'

/**
 * A statement that drizzle builds once, with a placeholder where each value goes, and that
 * each execution only fills in. Drizzle builds a sql`` template's text again at every
 * execution, walking every nested template; for the run claim (8 KB of templates) that was a
 * quarter to a third of the main thread's CPU per claim (bench/claim-cpu.ts), on the thread
 * all the workers' runs share. Executed as `db.execute` executes (drizzle's own prepared query
 * for the text and the values), so the database client treats it as ever: a prepared
 * statement, or a PLAN_EACH_TIME statement's values written into its text as constants.
 *
 * `build` gets a placeholder for each of `names`, and must put every value of the statement
 * in one (a value it spells into the text would be the first execution's for all of them).
 * The text is built with drizzle's default options, as `db` has them (no casing).
 */
export function builtOnce<V extends object>(
  names: ReadonlyArray<keyof V & string>,
  build: (placeholders: { [K in keyof V]: Placeholder<K & string> }) => SQL
): (db: Db | Tx, values: V) => Promise<unknown> {
  let built: Query | null = null
  return (db, values) => {
    built ??= new PgDialect().sqlToQuery(
      build(Object.fromEntries(names.map((name) => [name, sql.placeholder(name)])) as never)
    )
    // the values of the placeholders by name; fillPlaceholders (drizzle) fails on a missing one
    return db._.session.prepareQuery(built, undefined, undefined, false).execute(values as Record<string, unknown>)
  }
}
