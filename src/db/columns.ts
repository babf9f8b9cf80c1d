import { timestamp } from 'drizzle-orm/pg-core'

/** A `timestamptz` column read as a Date: every table's times. */
export const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })
