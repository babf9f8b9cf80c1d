import { sql, type SQL } from 'drizzle-orm'

/**
 * A list of constant strings as SQL literals (`'a', 'b'`), for CHECK constraints built from
 * the same `as const` list the wire schema uses. Only for constants in the code: never
 * for input.
 */
export function sqlList(values: readonly string[]): SQL {
  for (const value of values) if (!/^[A-Za-z0-9_.-]+$/.test(value)) throw new Error(`not a plain constant: ${value}`)
  return sql.raw(values.map((value) => `'${value}'`).join(', '))
}
