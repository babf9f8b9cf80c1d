import { api, ApiError, type ClientConfig, type OrgSummary, type SessionInfo } from './api.js'

/** Who the console acts as: a signed-in person, the dev org of this machine, or nobody yet. */
export type Identity =
  | { kind: 'user'; session: SessionInfo; org: OrgSummary | null }
  | { kind: 'dev' }
  | { kind: 'anonymous' }

export async function loadIdentity(): Promise<Identity> {
  // both at once: the config is only needed without a session, but asking for it after the
  // 401 would add a round trip to every dev-org page load
  const config = api<ClientConfig>('GET', '/config')
  config.catch(() => {})
  try {
    const session = await api<SessionInfo>('GET', '/auth/session')
    const active = session.session.activeOrganizationId
    const org = session.organizations.find((o) => o.id === active) ?? session.organizations[0] ?? null
    return { kind: 'user', session, org }
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) throw err
  }
  return (await config).allowDevOrg ? { kind: 'dev' } : { kind: 'anonymous' }
}

export const isAdmin = (who: Identity) => who.kind === 'dev' || (who.kind === 'user' && (who.org?.role === 'owner' || who.org?.role === 'admin'))
