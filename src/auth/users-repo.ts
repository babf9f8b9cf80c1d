import { eq } from 'drizzle-orm'
import { conflict } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { newId } from '../db/ids.js'
import { isUniqueViolation } from '../db/faults.js'
import { users } from './tables.js'

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase()
}

const publicColumns = { id: users.id, email: users.email, name: users.name, createdAt: users.createdAt }

export async function createUser(db: Db, email: string, name: string, passwordHash: string) {
  try {
    const [user] = await db
      .insert(users)
      .values({ id: newId(), email: normalizeEmail(email), name, passwordHash })
      .returning(publicColumns)
    return user!
  } catch (err) {
    if (isUniqueViolation(err)) throw conflict('an account with that email exists')
    throw err
  }
}

/** The user and hash for sign-in; null for unknown emails and for the password-less dev user. */
export async function findCredentials(db: Db, email: string) {
  const [row] = await db
    .select({ ...publicColumns, passwordHash: users.passwordHash })
    .from(users)
    .where(eq(users.email, normalizeEmail(email)))
  if (!row || row.passwordHash === null) return null
  return row
}

export async function findUser(db: Db, id: string) {
  const [row] = await db.select(publicColumns).from(users).where(eq(users.id, id))
  return row ?? null
}
