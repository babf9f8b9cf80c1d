/**
 * Contract 1.4's lists: `limit` and an opaque `cursor`, answered as `{items, nextCursor}`.
 * A cursor is the sort key of the last item sent, base64url-encoded; one that does not
 * decode to a key is read as no cursor (the first page), never as an error.
 */

const KEY = /^[A-Za-z0-9_-]{1,64}$/

export const encodeCursor = (key: string): string => Buffer.from(key).toString('base64url')

export function decodeCursor(cursor: string | undefined): string | null {
  if (!cursor) return null
  const key = Buffer.from(cursor, 'base64url').toString()
  return KEY.test(key) ? key : null
}

/** Cuts rows fetched with `limit + 1` into a page: the next cursor exists when a row was left over. */
export function pageOf<T>(rows: T[], limit: number, keyOf: (row: T) => string): { items: T[]; nextCursor: string | null } {
  const items = rows.slice(0, limit)
  return { items, nextCursor: rows.length > limit ? encodeCursor(keyOf(items[items.length - 1]!)) : null }
}

/**
 * A cursor over a sort of several keys (a board: column rank, position, id): the parts
 * joined by '.', each checked against its pattern; anything else is no cursor.
 */
export function decodeCursorParts(cursor: string | undefined, patterns: readonly RegExp[]): string[] | null {
  if (!cursor || cursor.length > 1024) return null
  const parts = Buffer.from(cursor, 'base64url').toString().split('.')
  return parts.length === patterns.length && parts.every((p, i) => patterns[i]!.test(p)) ? parts : null
}
