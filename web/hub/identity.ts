import { api, type OrgSummary, type SessionInfo, type WhoAmI } from './api.js'

/** Who the console acts as: a signed-in person, the dev org of this machine, or nobody yet. */
export type Identity =
  { kind: 'user'; session: SessionInfo; org: OrgSummary | null } | { kind: 'dev' } | { kind: 'anonymous' }

/**
 * One request, answered 200 whoever asks (GET /api/auth/whoami): GET /api/auth/session
 * answers 401 without a session, which the browser would report as an error on every page
 * the dev org or a signed-out person opens.
 */
export async function loadIdentity(): Promise<Identity> {
  const who = await api<WhoAmI>('GET', '/auth/whoami')
  if (who.kind !== 'user' || who.user === null || who.session === null)
    return { kind: who.kind === 'dev' ? 'dev' : 'anonymous' }
  const session: SessionInfo = { user: who.user, session: who.session, organizations: who.organizations }
  const active = session.session.activeOrganizationId
  const org = session.organizations.find((o) => o.id === active) ?? session.organizations[0] ?? null
  return { kind: 'user', session, org }
}

export const isAdmin = (who: Identity) =>
  who.kind === 'dev' || (who.kind === 'user' && (who.org?.role === 'owner' || who.org?.role === 'admin'))
