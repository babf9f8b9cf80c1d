import { asc, desc, gt, lt, SQL, type AnyColumn } from 'drizzle-orm'
import { validationFailed, type ApiError } from '../../plugins/errors.js'

/**
 * Paged lists: `limit` and an opaque `cursor`, answered as `{items, nextCursor}`.
 * A cursor is the sort key of the last item sent, base64url-encoded. A cursor the list
 * could not have given out is `400 validation_failed` naming `/querystring/cursor`: read as
 * the first page, it would send a client that mangled one round the same items forever.
 * (The schema's pattern refuses what is not base64url at all; these decoders refuse the
 * rest.)
 */

/** An id, or a secret's name (up to 128 characters) */
const KEY = /^[A-Za-z0-9_-]{1,128}$/

export const encodeCursor = (key: string): string => Buffer.from(key).toString('base64url')

/** A cursor no list handed out. */
export const invalidCursor = (): ApiError =>
  validationFailed([
    {
      path: '/querystring/cursor',
      message: 'is not a cursor of this list; send nextCursor as it came, or no cursor for the first page'
    }
  ])

/** The key in a cursor, or null for none; one that is not `key`'s, or not as encodeCursor writes it, is refused. */
export function decodeCursor(cursor: string | undefined, key: RegExp = KEY): string | null {
  if (cursor === undefined) return null
  const decoded = Buffer.from(cursor, 'base64url').toString()
  if (!key.test(decoded) || encodeCursor(decoded) !== cursor) throw invalidCursor()
  return decoded
}

/** Cuts rows fetched with `limit + 1` into a page: the next cursor exists when a row was left over. */
export function pageOf<T>(rows: T[], limit: number, keyOf: (row: T) => string): Page<T> {
  const items = rows.slice(0, limit)
  return { items, nextCursor: rows.length > limit ? encodeCursor(keyOf(items[items.length - 1]!)) : null }
}

/** What a list is asked for: how many, and after which cursor. */
export interface PageInput {
  limit: number
  cursor?: string | undefined
}

export interface Page<T> {
  items: T[]
  nextCursor: string | null
}

/** A list sorted by one unique key: the pieces its query needs, and the cut of its rows into a page. */
export interface Keyset {
  /** The condition for the rows after the cursor, undefined on the first page (drizzle's `and` skips it). */
  after: SQL | undefined
  orderBy: SQL
  /** One row more than the page, to learn whether another page follows. */
  limit: number
  page<T extends { id: string }>(rows: T[]): Page<T>
  page<T>(rows: T[], keyOf: (row: T) => string): Page<T>
}

/**
 * The paged list of a repository: `keyset(table.id, 'desc', q)` gives the query its
 * `after`, `orderBy` and `limit`, and `page(rows)` the answer. `readCursor` turns the
 * cursor into the key's value when the key is not an id or a name (a version, a time).
 */
export function keyset<V = string>(
  key: AnyColumn | SQL,
  order: 'asc' | 'desc',
  q: PageInput,
  readCursor: (cursor: string | undefined) => V | null = decodeCursor as (cursor: string | undefined) => V | null
): Keyset {
  const cursor = readCursor(q.cursor)
  const beyond = order === 'asc' ? gt : lt
  return {
    // two calls, not one: drizzle types a column's comparison apart from an expression's
    after: cursor === null ? undefined : key instanceof SQL ? beyond(key, cursor) : beyond(key, cursor),
    orderBy: order === 'asc' ? asc(key) : desc(key),
    limit: q.limit + 1,
    page: <T>(rows: T[], keyOf: (row: T) => string = (row) => (row as { id: string }).id) =>
      pageOf(rows, q.limit, keyOf)
  }
}

/**
 * A cursor over a sort of several keys (a board: column rank, position, id): the parts
 * joined by '.', each checked against its pattern; null for none, anything else refused.
 */
export function decodeCursorParts(cursor: string | undefined, patterns: readonly RegExp[]): string[] | null {
  if (cursor === undefined) return null
  if (cursor.length > 1024) throw invalidCursor()
  const decoded = Buffer.from(cursor, 'base64url').toString()
  const parts = decoded.split('.')
  if (
    parts.length !== patterns.length ||
    !parts.every((p, i) => patterns[i]!.test(p)) ||
    encodeCursor(decoded) !== cursor
  )
    throw invalidCursor()
  return parts
}
