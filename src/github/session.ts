import { integrationFailed, integrationNotConnected } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { getIntegration, setIntegrationError, type IntegrationRow } from '../integrations/integrations-repo.js'
import type { InternalSecrets } from '../secrets/service.js'
import { githubError, octokitFor, statusOf, type GitHubApi, type GitHubClientOptions } from './client.js'

/** The internal secret (`cairn:github:token`) an org's GitHub token is sealed under. */
export const TOKEN_SECRET = 'github:token'

export interface SessionDeps {
  db: Db
  secrets: InternalSecrets
  client: GitHubClientOptions
}

export const REVOKED_TOKEN =
  'GitHub refused the stored token (401 Bad credentials): it was revoked or has expired. An admin reconnects GitHub with PUT /api/integrations/github and a new token'
const UNREADABLE_TOKEN =
  "the stored GitHub token cannot be opened with this server's SECRETS_KEY. An admin reconnects GitHub with PUT /api/integrations/github"

/**
 * One org's use of GitHub: its connection and token, and `call`, which turns every GitHub
 * failure into the contract's answer. A 401 is re-verified once: GET /user with the same
 * token tells a token GitHub no longer accepts (revoked or expired: the integration's
 * `lastError` says so and the caller gets 502 upstream_failed asking for a reconnect) from
 * a 401 of that one request (it is retried once). A call that works clears `lastError`.
 */
export class GitHubSession {
  readonly api: GitHubApi
  readonly orgId: string
  readonly row: IntegrationRow
  private readonly deps: SessionDeps
  private cleared = false

  constructor(deps: SessionDeps, orgId: string, row: IntegrationRow, token: string, signal?: AbortSignal) {
    this.deps = deps
    this.orgId = orgId
    this.row = row
    this.api = octokitFor(token, orgId, deps.client, signal)
  }

  /**
   * Runs one GitHub request. `what` names it in messages ("the repository acme/tools");
   * `missing` is the 404's sentence; `notThere` lists the statuses that mean "not there".
   */
  async call<T>(
    what: string,
    missing: string,
    request: (api: GitHubApi) => Promise<T>,
    notThere: readonly number[] = [404]
  ): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        const out = await request(this.api)
        await this.worked()
        return out
      } catch (err) {
        if (statusOf(err) !== 401) throw githubError(err, what, missing, notThere)
        if (attempt > 0 || !(await this.tokenAccepted())) {
          await setIntegrationError(this.deps.db, this.orgId, 'github', REVOKED_TOKEN)
          throw integrationFailed(REVOKED_TOKEN)
        }
      }
    }
  }

  /** GET /user with the token: false when GitHub refuses the token itself. */
  private async tokenAccepted(): Promise<boolean> {
    try {
      await this.api.rest.users.getAuthenticated()
      return true
    } catch (err) {
      if (statusOf(err) === 401) return false
      throw githubError(err, 'the signed-in user', 'GitHub does not know the signed-in user')
    }
  }

  private async worked(): Promise<void> {
    if (this.cleared || this.row.lastError === null) return
    this.cleared = true
    await setIntegrationError(this.deps.db, this.orgId, 'github', null)
  }
}

/**
 * The org's GitHub session: 503 integration_not_connected when it has not connected
 * GitHub; 502 (and `lastError`) when its stored token no longer opens.
 */
export async function openSession(deps: SessionDeps, orgId: string, signal?: AbortSignal): Promise<GitHubSession> {
  const row = await getIntegration(deps.db, orgId, 'github')
  if (!row) throw integrationNotConnected('GitHub')
  const token = await deps.secrets.open(orgId, TOKEN_SECRET)
  if (token === null) {
    await setIntegrationError(deps.db, orgId, 'github', UNREADABLE_TOKEN)
    throw integrationFailed(UNREADABLE_TOKEN)
  }
  return new GitHubSession(deps, orgId, row, token, signal)
}
