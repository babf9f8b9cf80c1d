import { and, eq, lt, sql } from 'drizzle-orm'
import type { Db } from '../db/client.js'
import { rowsOf } from '../db/client.js'
import type { Role } from './tables.js'
import { sessions } from './tables.js'
import { generateSessionToken, hashSecret } from './tokens.js'
import { dateOf } from '../db/rows.js'

export const SESSION_LIFETIME_MS = 30 * 24 * 60 * 60 * 1000
/** a session used in its last 15 days is extended to a fresh 30 */
export const SESSION_REFRESH_MS = 15 * 24 * 60 * 60 * 1000

export interface IssuedSession {
  token: string
  id: string
  expiresAt: Date
}

/** A new session for a user; the token goes to the cookie, only its hash to the database. */
export async function createSession(db: Db, userId: string, activeOrgId: string | null = null): Promise<IssuedSession> {
  const token = generateSessionToken()
  const id = hashSecret(token)
  const expiresAt = new Date(Date.now() + SESSION_LIFETIME_MS)
  await db.insert(sessions).values({ id, userId, activeOrgId, expiresAt })
  // expired sessions are useless (lookups refuse them); sweep this user's away at each sign-in
  await db.delete(sessions).where(and(eq(sessions.userId, userId), lt(sessions.expiresAt, sql`now()`)))
  return { token, id, expiresAt }
}

export async function deleteSession(db: Db, id: string): Promise<void> {
  await db.delete(sessions).where(eq(sessions.id, id))
}

export async function setActiveOrg(db: Db, sessionId: string, orgId: string): Promise<void> {
  await db.update(sessions).set({ activeOrgId: orgId }).where(eq(sessions.id, sessionId))
}

/** A session with the org it acts in: its active org while the user is still a member, else the oldest membership. */
export interface SessionRecord {
  id: string
  userId: string
  expiresAt: Date
  orgId: string | null
  role: Role | null
}

interface SessionRow {
  id: string
  user_id: string
  expires_at: Date | string
  org_id: string | null
  role: Role | null
}

/**
 * One round trip: the session row and the membership it acts through. The membership
 * fallback is deterministic: the active org first, then the oldest membership, ties
 * broken on the org id.
 */
export async function findSession(db: Db, id: string): Promise<SessionRecord | null> {
  const rows = rowsOf<SessionRow>(
    await db.execute(sql`
    select s.id, s.user_id, s.expires_at, m.org_id, m.role
    from sessions s
    left join lateral (
      select org_id, role from members
      where user_id = s.user_id
      order by (org_id = s.active_org_id) is true desc, created_at, org_id
      limit 1
    ) m on true
    where s.id = ${id}`)
  )
  const row = rows[0]
  if (!row) return null
  return { id: row.id, userId: row.user_id, expiresAt: dateOf(row.expires_at), orgId: row.org_id, role: row.role }
}

/** Pushes the expiry forward; returns the new expiry. */
export async function extendSession(db: Db, id: string): Promise<Date> {
  const expiresAt = new Date(Date.now() + SESSION_LIFETIME_MS)
  await db.update(sessions).set({ expiresAt }).where(eq(sessions.id, id))
  return expiresAt
}
