import { uuidv7 } from 'uuidv7'

/** Opaque, time-sortable ids (UUIDv7), generated here so SQL stays PostgreSQL 15 compatible. */
export function newId(): string {
  return uuidv7()
}
