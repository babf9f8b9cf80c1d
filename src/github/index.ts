import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import { conflict, notFound, validationFailed } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import { errorResponses } from '../../schemas/common.js'
import {
  BuildWikiBody,
  ConnectGitHubBody,
  GitHubPullPage,
  GitHubRepoPage,
  ImportSkillBody,
  ListGitHubReposQuery,
  ListPullsQuery,
  PullsParams
} from '../../schemas/github.js'
import { IntegrationEnvelope } from '../../schemas/integrations.js'
import { RunEnvelope } from '../../schemas/runs.js'
import { SkillEnvelope } from '../../schemas/skills.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { integrationToWire } from '../integrations/integrations-repo.js'
import { skillMdLocation } from '../skills/skill-md.js'
import { skillToWire } from '../skills/skills-repo.js'
import { insertWikiRun } from './github-repo.js'

const INTEGRATIONS = ['integrations']
const GITHUB = ['github']
const ADMIN = { scope: 'admin' } as const
const NO_CONTENT = { type: 'null', description: 'done' } as const

/** A repository path the handler refuses: `..` segments, backslashes, control characters. */
function checkPath(path: string): void {
  // eslint-disable-next-line no-control-regex
  if (/[\\\u0000-\u001f\u007f]/.test(path) || path.split('/').includes('..')) {
    throw validationFailed([
      {
        path: '/body/path',
        message: 'must be a path inside the repository: no `..` segments, backslashes or control characters'
      }
    ])
  }
}

/** Git refuses `..` in a ref name; GitHub would answer 422 for it. */
function checkRef(ref: string | undefined): void {
  if (ref !== undefined && (ref.includes('..') || ref.startsWith('/') || ref.endsWith('/'))) {
    throw validationFailed([
      { path: '/body/ref', message: 'must be a branch, tag or commit SHA (no `..`, no leading or trailing `/`)' }
    ])
  }
}

/*
 * The routes leave 503 to the shared `ServiceUnavailable` answer of the document, which
 * declares `Retry-After` (upstream_rate_limited); integration_not_connected and
 * secrets_unavailable are 503s without it.
 */

/**
 * GitHub: connecting and disconnecting (admin), the org's repositories and
 * pull requests (conditional requests, so repeated lists cost no rate limit), skill import
 * and the repository wiki.
 */
const githubRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.put(
    '/integrations/github',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'connectGitHub',
        tags: INTEGRATIONS,
        summary:
          'Connect GitHub with a token (admin): checked against GitHub (GET /user) before it is kept, sealed, never returned; 400 when GitHub refuses it',
        description:
          "Checks a GitHub token against GitHub and, when GitHub accepts it, seals it as the organization's GitHub connection.",
        body: ConnectGitHubBody,
        response: { 200: IntegrationEnvelope, ...errorResponses(502) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const row = await app.github.connect(principal.orgId, request.body.token, realUserId(principal))
      return { integration: integrationToWire('github', row) }
    }
  )

  app.delete(
    '/integrations/github',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'disconnectGitHub',
        tags: INTEGRATIONS,
        summary:
          'Disconnect GitHub (admin): the token is deleted, cached lists are forgotten; wiki pages and imported skills stay',
        description: "Deletes the organization's GitHub token and cached lists; wiki pages and imported skills stay.",
        response: { 204: NO_CONTENT, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await app.github.disconnect(orgId))) throw notFound('this organization has not connected GitHub')
      return reply.code(204).send(null)
    }
  )

  app.get(
    '/github/repos',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listGitHubRepos',
        tags: GITHUB,
        summary:
          "Repositories the connected token can read, by name. A page holds at most 100 (GitHub's largest page); a repeated page is a conditional request (304 from GitHub: no rate limit used)",
        description:
          'Lists the repositories the connected token can read, one GitHub page at a time, through a cache that makes repeated pages conditional requests.',
        querystring: ListGitHubReposQuery,
        response: { 200: GitHubRepoPage, ...errorResponses(502) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      return app.github.listRepos(orgId, { limit: request.query.limit ?? 50, cursor: request.query.cursor })
    }
  )

  app.get(
    '/github/repos/:owner/:repo/pulls',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listGitHubPulls',
        tags: GITHUB,
        summary:
          'Pull requests of a repository (`state`: open by default, closed or all), newest first as GitHub lists them; conditional requests as for repositories',
        description:
          "Lists a repository's pull requests by state, newest first, through the same conditional-request cache.",
        params: PullsParams,
        querystring: ListPullsQuery,
        response: { 200: GitHubPullPage, ...errorResponses(404, 502) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const { owner, repo } = request.params
      const q = request.query
      return app.github.listPulls(orgId, owner, repo, {
        state: q.state ?? 'open',
        limit: q.limit ?? 50,
        cursor: q.cursor
      })
    }
  )

  app.post(
    '/skills/import',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'importSkill',
        tags: GITHUB,
        summary:
          'Import the SKILL.md of a repository folder (or the file `path` names) at `ref` (default: the default branch), resolved to a commit kept in `source`: 201 with a new skill or its next version, 200 when that commit was imported already',
        description:
          'Reads a SKILL.md from a GitHub repository at a commit and stores it as a new skill or the next version of the skill it came from.',
        body: ImportSkillBody,
        response: { 200: SkillEnvelope, 201: SkillEnvelope, ...errorResponses(404, 502) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { repo, path, ref } = request.body
      checkPath(path)
      checkRef(ref)
      const result = await app.github.importSkill(principal.orgId, { repo, path, ref }, realUserId(principal))
      const { file, folder } = skillMdLocation(path)
      switch (result.outcome) {
        case 'invalid':
          throw validationFailed(
            result.problems.map((p) => ({
              ...p,
              path: '/body/path',
              message: `${file} (${p.path.replace(/^\/skillMd\/?/, '') || 'file'}): ${p.message}`
            }))
          )
        case 'name_taken':
          throw conflict(
            `a skill named ${JSON.stringify(result.name)} exists in this organization and was not imported from ${result.resolved.repo}/${folder}; rename or delete it first`
          )
        default:
          return reply.code(result.outcome === 'unchanged' ? 200 : 201).send({ skill: skillToWire(result.skill) })
      }
    }
  )

  app.post(
    '/knowledge/wiki',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'buildRepoWiki',
        tags: GITHUB,
        summary:
          "Build a repository's wiki as a run: one knowledge record per page (README and top-level files, each document under docs/, each top-level source folder), tagged `wiki:<owner>/<repo>`; pages whose cited files did not change keep their version",
        description:
          "Starts a run that writes a repository's wiki into knowledge records, one per page, rewriting only pages whose cited files changed.",
        body: BuildWikiBody,
        response: { 202: RunEnvelope, ...errorResponses(404, 429, 502) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { repo, ref, engine, model } = request.body
      checkRef(ref)
      const resolved = await app.github.resolve(principal.orgId, repo, ref)
      // without a choice: the model a chat would use (the first ready one), else echo's outlines
      const chosen =
        engine === undefined && model === undefined ? await app.runs.chatEngine(principal.orgId, undefined) : null
      const answer = await app.runs.dispatch({
        principal,
        body: {
          prompt: `Build the wiki of ${resolved.repo} at ${resolved.commit} (${resolved.ref}).`,
          engine: chosen?.engine.id ?? engine,
          model: chosen ? (chosen.model ?? undefined) : model,
          metadata: { wiki: { repo: resolved.repo, ref: resolved.ref, commit: resolved.commit } }
        },
        idempotency: null,
        log: request.log,
        attach: async (tx, run) => {
          await insertWikiRun(tx, { runId: run.id, orgId: principal.orgId, ...resolved })
          return {}
        }
      })
      // the run is queued, the wiki is not built yet: 202
      return sendStored(reply, { ...answer, status: 202 })
    }
  )
}

// started only where the services it uses are: a group app without them fails at boot, naming what is missing
export default fp(githubRoutes, {
  name: 'github-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'github', 'runs'],
  encapsulate: true
})
