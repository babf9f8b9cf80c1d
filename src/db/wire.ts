/** A row as it goes on the wire: Date columns become ISO-8601 strings. */
export type Wire<T> = {
  [K in keyof T]: T[K] extends Date ? string : T[K] extends Date | null ? string | null : T[K]
}

export function toWire<T extends object>(row: T): Wire<T> {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(row)) out[key] = value instanceof Date ? value.toISOString() : value
  return out as Wire<T>
}
