import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { integrationFailed, secretsUnavailable, upstreamRateLimited, validationFailed } from '../../plugins/errors.js'
import type { GitHubPullWire, GitHubRepoWire, PULL_STATES } from '../../schemas/github.js'

export type PullState = (typeof PULL_STATES)[number]
import type { Config } from '../config.js'
import { decodeCursorParts } from '../db/paging.js'
import { deleteIntegration, upsertIntegration, type IntegrationRow } from '../integrations/integrations-repo.js'
import type { RunJobs } from '../runs/ports/jobs.js'
import type { SecretsService } from '../secrets/service.js'
import { skillMdLocation } from '../skills/skill-md.js'
import {
  hasNextPage,
  isNotModified,
  octokitFor,
  rateLimitWait,
  statusOf,
  type GitHubApi,
  type GitHubClientOptions
} from './client.js'
import { clearCachedLists, getCachedList, putCachedList } from './github-repo.js'
import type { SkillImport, SkillImports, WikiRecords } from './ports.js'
import { openSession, TOKEN_SECRET, type GitHubSession, type SessionDeps } from './session.js'
import { wikiJobs } from './wiki-job.js'

/** GitHub's largest page. */
const GITHUB_MAX_PER_PAGE = 100
/** The largest SKILL.md read (the skills routes take at most this much text). */
const SKILL_MD_MAX_BYTES = 262_144

export interface Page<T> {
  items: T[]
  nextCursor: string | null
}

/** A repository and commit a ref was resolved to. */
export interface ResolvedRef {
  /** GitHub's `owner/name` (its spelling, whatever the caller's case) */
  repo: string
  /** the ref asked for, or the default branch */
  ref: string
  commit: string
}

/** The github group's instance-wide side, as `app.github`. */
export interface GitHubService {
  /** GITHUB_API_URL */
  apiUrl: string
  /** checks the token against GitHub (GET /user), then keeps it sealed; the integration row */
  connect(orgId: string, token: string, connectedBy: string | null): Promise<IntegrationRow>
  /** false when the org had not connected GitHub */
  disconnect(orgId: string): Promise<boolean>
  listRepos(orgId: string, q: { limit: number; cursor: string | undefined }): Promise<Page<GitHubRepoWire>>
  listPulls(
    orgId: string,
    owner: string,
    repo: string,
    q: { state: PullState; limit: number; cursor: string | undefined }
  ): Promise<Page<GitHubPullWire>>
  /** a repository's ref (default: its default branch) resolved to a commit */
  resolve(orgId: string, repo: string, ref: string | undefined): Promise<ResolvedRef>
  /** imports the SKILL.md of a repository folder at a ref */
  importSkill(
    orgId: string,
    input: { repo: string; path: string; ref: string | undefined },
    createdBy: string | null
  ): Promise<SkillImport & { resolved: ResolvedRef }>
  /** the runs group's port: repo wiki runs */
  forJobs: RunJobs
}

declare module 'fastify' {
  interface FastifyInstance {
    github: GitHubService
  }
}

/** The variables the GitHub service reads: a read of another is a type error. */
export type GitHubConfig = Pick<Config, 'GITHUB_API_URL' | 'GITHUB_TIMEOUT_MS'>

export interface GitHubServiceOptions {
  config: GitHubConfig
  /** the knowledge group's port: wiki pages are records */
  records: WikiRecords
  /** the skills group's port: imported SKILL.md files are skills */
  skills: SkillImports
  /** where the org's token is sealed (an internal secret); without a key ring nothing can be connected */
  secrets: Pick<SecretsService, 'ring' | 'internal'>
}

/**
 * A list cursor: GitHub's page number and page size, so every page of one listing has the
 * size of its first (whatever `limit` a later request sends). Anything else is refused.
 */
function pageOf(cursor: string | undefined, limit: number): { page: number; perPage: number } {
  const parts = decodeCursorParts(cursor, [/^[1-9]\d{0,5}$/, /^[1-9]\d{0,2}$/])
  if (parts) return { page: Number(parts[0]), perPage: Math.min(GITHUB_MAX_PER_PAGE, Number(parts[1])) }
  return { page: 1, perPage: Math.min(GITHUB_MAX_PER_PAGE, limit) }
}
const cursorOf = (page: number, perPage: number) => Buffer.from(`${page}.${perPage}`).toString('base64url')

interface GitHubRepoData {
  id: number
  full_name: string
  name: string
  owner: { login: string } | null
  private: boolean
  default_branch?: string
  description: string | null
  html_url: string
  updated_at?: string | null
}

export const repoToWire = (r: GitHubRepoData): GitHubRepoWire => ({
  id: String(r.id),
  fullName: r.full_name,
  owner: r.owner?.login ?? r.full_name.split('/')[0]!,
  name: r.name,
  private: r.private,
  defaultBranch: r.default_branch ?? 'main',
  description: r.description ?? null,
  htmlUrl: r.html_url,
  updatedAt: r.updated_at ?? null
})

/** A pull request as GitHub sends it; the fields that may be null may also be left out. */
interface GitHubPullData {
  id: number
  number: number
  title: string
  state: string
  draft?: boolean
  merged_at?: string | null
  user?: { login: string } | null
  head: { ref: string }
  base: { ref: string }
  html_url: string
  created_at: string
  updated_at: string
  closed_at?: string | null
}

export const pullToWire = (p: GitHubPullData): GitHubPullWire => ({
  id: String(p.id),
  number: p.number,
  title: p.title,
  state: p.state === 'closed' ? 'closed' : 'open',
  draft: p.draft ?? false,
  merged: typeof p.merged_at === 'string',
  author: p.user?.login ?? null,
  headRef: p.head.ref,
  baseRef: p.base.ref,
  htmlUrl: p.html_url,
  createdAt: p.created_at,
  updatedAt: p.updated_at,
  closedAt: p.closed_at ?? null,
  mergedAt: p.merged_at ?? null
})

/**
 * A pull request from the conditional-request cache. Earlier releases stored one whose
 * GitHub payload left out `closed_at` or `merged_at` without those fields (and as merged);
 * such a record is read as GitHub meant it: not closed, not merged.
 */
const cachedPull = (p: GitHubPullWire): GitHubPullWire => {
  const mergedAt = p.mergedAt ?? null
  return { ...p, closedAt: p.closedAt ?? null, mergedAt, merged: mergedAt !== null }
}

const COMMIT_SHA = /^[0-9a-f]{40}([0-9a-f]{24})?$/

/** GitHub: the connection, the conditional-request lists, refs, skill import and the wiki job. */
export default fp(
  async function githubService(app: FastifyInstance, opts: GitHubServiceOptions) {
    const { config, records, skills, secrets } = opts
    const db = app.db
    const client: GitHubClientOptions = {
      baseUrl: config.GITHUB_API_URL,
      timeoutMs: config.GITHUB_TIMEOUT_MS,
      log: app.log.child({ component: 'github' })
    }
    const deps: SessionDeps = { db, secrets: secrets.internal, client }

    /**
     * One page of a list, through the org's conditional-request cache: the stored ETag goes
     * out as If-None-Match, and a 304 (free of GitHub's rate limit) is answered from the
     * stored items; a 200 replaces them.
     */
    async function cachedPage<T>(
      session: GitHubSession,
      request: string,
      what: string,
      missing: string,
      fetchPage: (
        api: GitHubApi,
        headers: Record<string, string>
      ) => Promise<{ data: unknown; headers: { etag?: string | undefined; link?: string | undefined } }>,
      toWire: (item: never) => T,
      fromCache: (item: T) => T = (item) => item
    ): Promise<{ items: T[]; hasNext: boolean }> {
      const cached = await getCachedList(db, session.orgId, request)
      const answer = await session.call(what, missing, (api) =>
        fetchPage(api, cached ? { 'if-none-match': cached.etag } : {}).catch((err: unknown) => {
          if (cached && isNotModified(err)) return null
          throw err
        })
      )
      if (answer === null) {
        const body = cached!.body as { items: T[]; hasNext: boolean }
        return { items: body.items.map(fromCache), hasNext: body.hasNext }
      }
      const items = (Array.isArray(answer.data) ? answer.data : []).map((item) => toWire(item as never))
      const body = { items, hasNext: hasNextPage(answer.headers.link) }
      if (answer.headers.etag) await putCachedList(db, session.orgId, request, { etag: answer.headers.etag, body })
      return body
    }

    async function resolveWith(
      session: GitHubSession,
      repoName: string,
      ref: string | undefined
    ): Promise<ResolvedRef> {
      const [owner, repo] = repoName.split('/') as [string, string]
      const { data } = await session.call(
        `the repository ${repoName}`,
        `GitHub has no repository ${repoName} that this token can read`,
        (api) => api.rest.repos.get({ owner, repo })
      )
      const wanted = ref ?? data.default_branch
      const commit = await session.call(
        `the ref ${wanted} of ${data.full_name}`,
        `${data.full_name} has no branch, tag or commit ${wanted}`,
        (api) =>
          api.request('GET /repos/{owner}/{repo}/commits/{ref}', {
            owner,
            repo,
            ref: wanted,
            mediaType: { format: 'sha' }
          }),
        // GitHub answers 422 for a ref that names no commit
        [404, 409, 422]
      )
      const answered = commit.data as unknown
      const sha = typeof answered === 'string' ? answered.trim() : (answered as { sha?: unknown } | null)?.sha
      if (typeof sha !== 'string' || !COMMIT_SHA.test(sha))
        throw integrationFailed(
          `GitHub answered the ref ${wanted} of ${data.full_name} with something that is not a commit SHA`
        )
      return { repo: data.full_name, ref: wanted, commit: sha }
    }

    app.decorate('github', {
      apiUrl: config.GITHUB_API_URL,

      async connect(orgId, token, connectedBy) {
        // without a key ring the token could not be kept: say so before asking GitHub
        if (!secrets.ring) throw secretsUnavailable()
        let user: { login: string; id: number }
        try {
          ;({ data: user } = await octokitFor(token, orgId, client).rest.users.getAuthenticated())
        } catch (err) {
          const wait = rateLimitWait(err)
          if (wait !== null) throw upstreamRateLimited('GitHub', wait)
          const status = statusOf(err)
          if (status === 401 || status === 403) {
            throw validationFailed([
              {
                path: '/body/token',
                message: `GitHub refused this token (${status}); send a valid personal access token`
              }
            ])
          }
          throw integrationFailed(
            status === null
              ? 'GitHub did not answer; the token was not checked and not kept'
              : `GitHub answered ${status} when the token was checked; it was not kept`
          )
        }
        await secrets.internal.put(orgId, TOKEN_SECRET, token)
        const row = await upsertIntegration(db, orgId, 'github', {
          account: user.login,
          settings: { userId: user.id },
          connectedBy
        })
        // answers cached for the previous token are not this one's to give
        await clearCachedLists(db, orgId)
        return row
      },

      async disconnect(orgId) {
        const had = await deleteIntegration(db, orgId, 'github')
        if (!had) return false
        await secrets.internal.remove(orgId, [TOKEN_SECRET])
        await clearCachedLists(db, orgId)
        return true
      },

      async listRepos(orgId, q) {
        // the cursor first: a bad one is refused without asking GitHub anything
        const { page, perPage } = pageOf(q.cursor, q.limit)
        const session = await openSession(deps, orgId)
        const { items, hasNext } = await cachedPage(
          session,
          `GET /user/repos?per_page=${perPage}&page=${page}`,
          'the repositories of the token',
          "GitHub does not know the token's user",
          (api, headers) => api.rest.repos.listForAuthenticatedUser({ per_page: perPage, page, headers }),
          repoToWire
        )
        return { items, nextCursor: hasNext ? cursorOf(page + 1, perPage) : null }
      },

      async listPulls(orgId, owner, repo, q) {
        const { page, perPage } = pageOf(q.cursor, q.limit)
        const session = await openSession(deps, orgId)
        const name = `${owner}/${repo}`
        const request = `GET /repos/${name.toLowerCase()}/pulls?state=${q.state}&per_page=${perPage}&page=${page}`
        const { items, hasNext } = await cachedPage(
          session,
          request,
          `the pull requests of ${name}`,
          `GitHub has no repository ${name} that this token can read`,
          (api, headers) => api.rest.pulls.list({ owner, repo, state: q.state, per_page: perPage, page, headers }),
          pullToWire,
          cachedPull
        )
        return { items, nextCursor: hasNext ? cursorOf(page + 1, perPage) : null }
      },

      async resolve(orgId, repo, ref) {
        return resolveWith(await openSession(deps, orgId), repo, ref)
      },

      async importSkill(orgId, input, createdBy) {
        const session = await openSession(deps, orgId)
        const resolved = await resolveWith(session, input.repo, input.ref)
        const [owner, repo] = resolved.repo.split('/') as [string, string]
        const { file } = skillMdLocation(input.path)
        const missing = `${resolved.repo} has no ${file} at ${resolved.commit.slice(0, 12)}`
        const { data } = await session.call(`${file} in ${resolved.repo}`, missing, (api) =>
          api.rest.repos.getContent({ owner, repo, path: file, ref: resolved.commit })
        )
        const content = data as { type?: unknown; encoding?: unknown; content?: unknown; size?: unknown }
        if (Array.isArray(data) || content.type !== 'file')
          throw validationFailed([{ path: '/body/path', message: missing }])
        if (typeof content.size === 'number' && content.size > SKILL_MD_MAX_BYTES) {
          throw validationFailed([
            {
              path: '/body/path',
              message: `${file} is ${content.size} bytes; a SKILL.md may have at most ${SKILL_MD_MAX_BYTES}`
            }
          ])
        }
        if (content.encoding !== 'base64' || typeof content.content !== 'string')
          throw integrationFailed(`GitHub did not send the content of ${file}`)
        const skillMd = Buffer.from(content.content, 'base64').toString('utf8')
        // the path as asked (slashes normalized): the folder, or the file itself
        const path = input.path
          .split('/')
          .filter((part) => part !== '' && part !== '.')
          .join('/')
        const result = await skills.importSkill(
          orgId,
          skillMd,
          { kind: 'github', repo: resolved.repo, path, ref: resolved.ref, commit: resolved.commit },
          createdBy
        )
        return { ...result, resolved }
      },

      forJobs: wikiJobs({ db, records, session: (orgId, signal) => openSession(deps, orgId, signal) })
    } satisfies GitHubService)
  },
  { name: 'github', fastify: '5.x', dependencies: ['db', 'secrets'] }
)
