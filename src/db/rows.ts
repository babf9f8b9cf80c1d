/**
 * Reading driver rows of hand-written SQL (`db.execute`). postgres.js and PGlite return
 * some types differently (timestamps as Date or string, booleans as true or 't', jsonb as
 * an object or its text, bigint as string or number); these read either.
 */

export const jsonOf = <T>(value: unknown): T => (typeof value === 'string' ? JSON.parse(value) : value) as T

export const dateOf = (value: unknown): Date => (value instanceof Date ? value : new Date(value as string))

export const dateOrNull = (value: unknown): Date | null =>
  value === null || value === undefined ? null : dateOf(value)

export const boolOf = (value: unknown): boolean => value === true || value === 't'

/** An ISO-8601 UTC timestamp from a Date or a driver's timestamp text. */
export const isoOf = (value: Date | string): string => dateOf(value).toISOString()

export const isoOrNull = (value: Date | string | null | undefined): string | null =>
  value === null || value === undefined ? null : isoOf(value)
