import { and, asc, eq, like, or } from 'drizzle-orm'
import { conflict, notFound, organizationOwnerRequired } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { isUniqueViolation } from '../db/faults.js'
import { newId } from '../db/ids.js'
import { members, organizations, sessions, users, type Role } from './tables.js'

/** A URL-safe slug from a display name: `Acme Rockets, Inc.` → `acme-rockets-inc`. */
export function slugify(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+/, '')
    .slice(0, 48)
    .replace(/-+$/, '')
  return slug || 'org'
}

/** The user's organizations with their role, oldest membership first (the fallback order). */
export async function listMemberships(db: Db, userId: string) {
  return db
    .select({ id: organizations.id, name: organizations.name, slug: organizations.slug, role: members.role })
    .from(members)
    .innerJoin(organizations, eq(organizations.id, members.orgId))
    .where(eq(members.userId, userId))
    .orderBy(asc(members.createdAt), asc(members.orgId))
}

export async function roleIn(db: Db, orgId: string, userId: string): Promise<Role | null> {
  const rows = await db
    .select({ role: members.role })
    .from(members)
    .where(and(eq(members.orgId, orgId), eq(members.userId, userId)))
  return rows[0]?.role ?? null
}

/** Slugs nobody can claim: `dev` is the seeded dev org's, whether or not it is seeded on this deployment. */
const RESERVED_SLUGS = new Set(['dev'])

/** Creates an org with the user as owner and makes it the session's active org, in one transaction. */
export async function createOrganization(db: Db, userId: string, sessionId: string, name: string, slug: string) {
  if (RESERVED_SLUGS.has(slug)) throw conflict(`the slug ${JSON.stringify(slug)} is taken`)
  await refuseSameName(db, userId, name)
  try {
    return await insertOrganization(db, userId, sessionId, name, slug)
  } catch (err) {
    if (isUniqueViolation(err)) throw conflict(`the slug ${JSON.stringify(slug)} is taken`)
    throw err
  }
}

const sameName = (a: string, b: string) => a.trim().toLowerCase() === b.trim().toLowerCase()

/**
 * One person never has two organizations of the same name (whatever the case): the switcher
 * could not tell them apart.
 */
async function refuseSameName(db: Db, userId: string, name: string) {
  const mine = await listMemberships(db, userId)
  const twin = mine.find((o) => sameName(o.name, name))
  if (twin)
    throw conflict(
      `you already belong to an organization named ${JSON.stringify(twin.name)}: choose another name for the new one`
    )
}

/**
 * Creates an org whose slug is made from its name: the first free one of `acme`, `acme-2`,
 * `acme-3`… (two teams may both call themselves Acme; only a slug the caller chose can be taken).
 */
export async function createOrganizationNamed(db: Db, userId: string, sessionId: string, name: string) {
  await refuseSameName(db, userId, name)
  const base = slugify(name)
  for (let attempt = 0; ; attempt++) {
    const taken = new Set(
      (
        await db
          .select({ slug: organizations.slug })
          .from(organizations)
          .where(or(eq(organizations.slug, base), like(organizations.slug, `${base}-%`)))
      ).map((r) => r.slug)
    )
    for (const reserved of RESERVED_SLUGS) taken.add(reserved)
    let slug = base
    for (let n = 2; taken.has(slug); n++) {
      const suffix = `-${n}`
      slug = `${base.slice(0, 48 - suffix.length).replace(/-+$/, '')}${suffix}`
    }
    try {
      return await insertOrganization(db, userId, sessionId, name, slug)
    } catch (err) {
      // another request took the same slug between the read and the insert: look again
      if (!isUniqueViolation(err) || attempt >= 4) throw err
    }
  }
}

function insertOrganization(db: Db, userId: string, sessionId: string, name: string, slug: string) {
  return db.transaction(async (tx) => {
    const [org] = await tx.insert(organizations).values({ id: newId(), name, slug }).returning()
    await tx.insert(members).values({ orgId: org!.id, userId, role: 'owner' })
    await tx.update(sessions).set({ activeOrgId: org!.id }).where(eq(sessions.id, sessionId))
    return { id: org!.id, name: org!.name, slug: org!.slug, role: 'owner' as Role, createdAt: org!.createdAt }
  })
}

const memberColumns = {
  organizationId: members.orgId,
  userId: members.userId,
  email: users.email,
  name: users.name,
  role: members.role,
  createdAt: members.createdAt
}

/** The org's members with their roles, oldest membership first. */
export async function listMembers(db: Db, orgId: string) {
  return db
    .select(memberColumns)
    .from(members)
    .innerJoin(users, eq(users.id, members.userId))
    .where(eq(members.orgId, orgId))
    .orderBy(asc(members.createdAt), asc(members.userId))
}

async function memberOf(db: Db, orgId: string, userId: string) {
  const rows = await db
    .select(memberColumns)
    .from(members)
    .innerJoin(users, eq(users.id, members.userId))
    .where(and(eq(members.orgId, orgId), eq(members.userId, userId)))
  return rows[0] ?? null
}

/**
 * Owner-level changes (granting the owner role, changing or removing an owner) need an
 * owner: otherwise an admin could promote themselves and remove the owners.
 */
function requireOwnerFor(actorRole: Role, touchesOwner: boolean): void {
  if (touchesOwner && actorRole !== 'owner') {
    throw organizationOwnerRequired()
  }
}

export async function addMember(db: Db, orgId: string, actorRole: Role, email: string, role: Role) {
  requireOwnerFor(actorRole, role === 'owner')
  const [user] = await db
    .select({ id: users.id, passwordHash: users.passwordHash })
    .from(users)
    .where(eq(users.email, email.toLowerCase()))
  if (!user || user.passwordHash === null) throw notFound('no user with that email')
  try {
    await db.insert(members).values({ orgId, userId: user.id, role })
  } catch (err) {
    if (isUniqueViolation(err)) throw conflict('that user is already a member')
    throw err
  }
  return (await memberOf(db, orgId, user.id))!
}

/**
 * Locks the org's membership rows, so two concurrent demotions or removals of two
 * owners cannot both pass the last-owner check.
 */
async function lockedMembers(tx: Parameters<Parameters<Db['transaction']>[0]>[0], orgId: string) {
  return tx
    .select({ userId: members.userId, role: members.role })
    .from(members)
    .where(eq(members.orgId, orgId))
    .for('update')
}

export async function changeRole(db: Db, orgId: string, actorRole: Role, userId: string, role: Role) {
  await db.transaction(async (tx) => {
    const rows = await lockedMembers(tx, orgId)
    const target = rows.find((r) => r.userId === userId)
    if (!target) throw notFound('no such member in this organization')
    requireOwnerFor(actorRole, target.role === 'owner' || role === 'owner')
    const owners = rows.filter((r) => r.role === 'owner').length
    if (target.role === 'owner' && role !== 'owner' && owners <= 1) throw conflict('the last owner cannot be demoted')
    await tx
      .update(members)
      .set({ role })
      .where(and(eq(members.orgId, orgId), eq(members.userId, userId)))
  })
  return (await memberOf(db, orgId, userId))!
}

export async function removeMember(db: Db, orgId: string, actorRole: Role, userId: string): Promise<void> {
  await db.transaction(async (tx) => {
    const rows = await lockedMembers(tx, orgId)
    const target = rows.find((r) => r.userId === userId)
    if (!target) throw notFound('no such member in this organization')
    requireOwnerFor(actorRole, target.role === 'owner')
    const owners = rows.filter((r) => r.role === 'owner').length
    if (target.role === 'owner' && owners <= 1) throw conflict('the last owner cannot be removed')
    await tx.delete(members).where(and(eq(members.orgId, orgId), eq(members.userId, userId)))
    // a session whose active org this was falls back to the user's first membership
    await tx
      .update(sessions)
      .set({ activeOrgId: null })
      .where(and(eq(sessions.userId, userId), eq(sessions.activeOrgId, orgId)))
  })
}
