import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import { rowsOf } from '../../src/db/client.js'
import { newId } from '../../src/db/ids.js'
import { providers } from '../../src/providers/tables.js'
import { mcpServers } from '../../src/mcp/tables.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import { fixtureGitHub } from '../github/fake-github.js'
import { mintKey, signUpWithOrg, type SignedIn, type TestOrg } from '../helper.js'

/**
 * The tenant-isolation walk: a reusable property test. Two orgs (an attacker and a
 * victim) both get data; then every route that takes an id is called with the victim's
 * ids by the attacker's session and by the attacker's API key, and must answer 404 (or
 * a scope error before it: 401, 403) and change nothing; and every list route, called by
 * the attacker, must not contain a single victim id.
 *
 * HOW TO EXTEND IT (every route group that adds routes with ids or lists):
 * add a `TenantFixture` to `TENANT_FIXTURES` below, with
 * - `routes`: every `METHOD /api/pattern/:param` of your group that takes an id;
 * - `lists`: your list routes (`GET /api/things`);
 * - `seed(app, owner)`: creates rows for that org through the API (owner.cookie,
 *   owner.authorization) and returns the path parameters to use, by name ({id, runId…});
 * - `snapshot(app, owner)`: reads that org's rows straight from the database, in a stable
 *   order; it must be identical before and after the attacker's calls;
 * - `body(route)`: a valid body for the write routes (so a 400 does not hide a leak).
 * test/tenancy/isolation.test.ts fails when a registered route with a path parameter is
 * covered by no fixture, so a new route cannot skip this walk.
 */

export interface Actor extends SignedIn {
  org: TestOrg
  /** `Bearer cairn_…`: a key of the actor's org */
  authorization: string
}

export interface TenantFixture {
  name: string
  routes: string[]
  lists: string[]
  seed(app: FastifyInstance, owner: Actor): Promise<Record<string, string>>
  snapshot(app: FastifyInstance, owner: Actor): Promise<unknown>
  body?(route: string, attacker: Actor): unknown
}

async function rows(app: FastifyInstance, query: ReturnType<typeof sql>): Promise<unknown[]> {
  return rowsOf(await app.db.execute(query))
}

export const TENANT_FIXTURES: TenantFixture[] = [
  {
    name: 'api keys',
    routes: ['DELETE /api/keys/:id'],
    lists: ['GET /api/keys'],
    async seed(app, owner) {
      const { id } = await mintKey(app, owner.cookie, 'fixture key')
      return { id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, name, revoked_at from api_keys where org_id = ${owner.org.id} order by id`)
  },
  {
    name: 'organizations and members',
    routes: [
      'GET /api/auth/organizations/:orgId/members',
      'POST /api/auth/organizations/:orgId/members',
      'PATCH /api/auth/organizations/:orgId/members/:userId',
      'DELETE /api/auth/organizations/:orgId/members/:userId'
    ],
    lists: ['GET /api/auth/organizations', 'GET /api/auth/session', 'GET /api/auth/whoami'],
    async seed(_app, owner) {
      return { orgId: owner.org.id, userId: owner.user.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select user_id, role from members where org_id = ${owner.org.id} order by user_id`),
    body(route, attacker) {
      if (route.startsWith('POST')) return { email: attacker.user.email, role: 'owner' }
      if (route.startsWith('PATCH')) return { role: 'member' }
      return undefined
    }
  },
  {
    name: 'runs and threads',
    routes: [
      'GET /api/runs/:id',
      'POST /api/runs/:id/cancel',
      'GET /api/runs/:id/events',
      'GET /api/runs/:id/messages',
      'GET /api/runs/:rootRunId/thread-events',
      'GET /api/threads/:rootRunId'
    ],
    lists: [
      'GET /api/runs',
      'GET /api/threads',
      'GET /api/dashboard',
      'GET /api/usage?groupBy=user',
      'GET /api/integrations'
    ],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'tenant fixture' }
      })
      const { run } = res.json() as { run: { id: string; rootRunId: string } }
      return { id: run.id, rootRunId: run.rootRunId }
    },
    // the run executes meanwhile, so its status moves on its own; a cancel would show in cancel_requested
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select id, root_run_id, prompt, cancel_requested from runs where org_id = ${owner.org.id} order by id`
      ),
    body(route) {
      return route.startsWith('POST') ? {} : undefined
    }
  },
  {
    name: 'uploads',
    routes: ['GET /api/uploads/:id', 'GET /api/uploads/:id/content', 'DELETE /api/uploads/:id'],
    lists: ['GET /api/uploads'],
    async seed(app, owner) {
      const boundary = 'fixtureboundary'
      const payload = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="fixture.txt"\r\nContent-Type: text/plain\r\n\r\nfixture ${owner.org.id}\r\n--${boundary}--\r\n`
      const res = await app.inject({
        method: 'POST',
        url: '/api/uploads',
        headers: { cookie: owner.cookie, 'content-type': `multipart/form-data; boundary=${boundary}` },
        payload
      })
      return { id: (res.json() as { upload: { id: string } }).upload.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, name, sha256 from uploads where org_id = ${owner.org.id} order by id`)
  },
  {
    name: 'artifacts',
    routes: [
      'GET /api/artifacts/:id',
      'DELETE /api/artifacts/:id',
      'GET /api/artifacts/:id/content',
      'PUT /api/artifacts/:id/content',
      'GET /api/artifacts/:id/versions',
      'GET /api/artifacts/:id/versions/:version/content',
      'POST /api/artifacts/:id/proposals',
      'GET /api/artifacts/:id/proposals',
      'GET /api/artifacts/:id/proposals/:pid/diff',
      'POST /api/artifacts/:id/proposals/:pid/accept',
      'POST /api/artifacts/:id/proposals/:pid/reject'
    ],
    lists: ['GET /api/artifacts'],
    async seed(app, owner) {
      const headers = { cookie: owner.cookie }
      const created = await app.inject({
        method: 'POST',
        url: '/api/artifacts',
        headers,
        payload: { name: 'fixture.md', content: `fixture ${owner.org.id}` }
      })
      const { artifact } = created.json() as { artifact: { id: string } }
      const proposed = await app.inject({
        method: 'POST',
        url: `/api/artifacts/${artifact.id}/proposals`,
        headers,
        payload: { content: 'proposed', baseVersion: 1 }
      })
      return { id: artifact.id, version: '1', pid: (proposed.json() as { proposal: { id: string } }).proposal.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`
      select a.id, a.version, a.sha256, p.id as proposal, p.state from artifacts a left join artifact_proposals p on p.artifact_id = a.id
      where a.org_id = ${owner.org.id} order by a.id, p.id`
      ),
    body(route) {
      if (route === 'POST /api/artifacts/:id/proposals') return { content: 'attack', baseVersion: 1 }
      if (route === 'PUT /api/artifacts/:id/content') return { content: 'attack' }
      return route.startsWith('POST') ? {} : undefined
    }
  },
  {
    name: 'knowledge records',
    routes: [
      'GET /api/knowledge/:id',
      'PATCH /api/knowledge/:id',
      'DELETE /api/knowledge/:id',
      'GET /api/knowledge/:id/history'
    ],
    lists: [
      'GET /api/knowledge',
      'GET /api/knowledge/search?q=fixture',
      'GET /api/knowledge/search?q=fixture&mode=semantic'
    ],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge',
        headers: { cookie: owner.cookie },
        payload: { title: 'fixture', body: `fixture ${owner.org.id}`, tags: ['fixture'] }
      })
      return { id: (res.json() as { record: { id: string } }).record.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`
      select r.id, r.version, r.title, r.body, (select count(*)::int from knowledge_record_history h where h.org_id = r.org_id and h.record_id = r.id) as history
      from knowledge_records r where r.org_id = ${owner.org.id} order by r.id`
      ),
    body: (route) => (route === 'PATCH /api/knowledge/:id' ? { title: 'attack', version: 1 } : undefined)
  },
  {
    name: 'knowledge documents',
    routes: [
      'GET /api/knowledge/documents/:id',
      'GET /api/knowledge/documents/:id/chunks',
      'POST /api/knowledge/documents/:id/retry',
      'DELETE /api/knowledge/documents/:id'
    ],
    lists: ['GET /api/knowledge/documents'],
    async seed(app, owner) {
      const boundary = 'fixtureboundary'
      const payload = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="fixture.md"\r\nContent-Type: text/markdown\r\n\r\n# Fixture\n\nfixture ${owner.org.id}\r\n--${boundary}--\r\n`
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge/documents',
        headers: { cookie: owner.cookie, 'content-type': `multipart/form-data; boundary=${boundary}` },
        payload
      })
      const { document } = res.json() as { document: { id: string } }
      // failed, so that a retry by the owner would be allowed: the attacker's must still be a 404
      await app.db.execute(
        sql`update knowledge_documents set state = 'failed', last_error = 'fixture' where id = ${document.id}`
      )
      return { id: document.id }
    },
    // the worker may be extracting while the walk runs: only what the attacker could change
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select id, name, sha256, attempts from knowledge_documents where org_id = ${owner.org.id} order by id`
      ),
    body: (route) => (route.startsWith('POST') ? {} : undefined)
  },
  {
    name: 'knowledge drafts',
    routes: ['POST /api/knowledge/drafts/:id/approve', 'POST /api/knowledge/drafts/:id/reject'],
    lists: ['GET /api/knowledge/drafts'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge/drafts',
        headers: { cookie: owner.cookie },
        payload: { title: 'fixture draft', body: `fixture ${owner.org.id}` }
      })
      return { id: (res.json() as { draft: { id: string } }).draft.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, state, title from knowledge_drafts where org_id = ${owner.org.id} order by id`),
    body: (route) => (route.startsWith('POST') ? {} : undefined)
  },
  {
    name: 'skills',
    routes: [
      'GET /api/skills/:id',
      'GET /api/skills/:id/skill.md',
      'PATCH /api/skills/:id',
      'DELETE /api/skills/:id',
      'POST /api/skills/:id/run'
    ],
    lists: ['GET /api/skills'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers: { cookie: owner.cookie },
        payload: { name: 'fixture-skill', description: `fixture ${owner.org.id}`, instructions: 'Say hello.' }
      })
      return { id: (res.json() as { skill: { id: string } }).skill.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select s.id, s.version, s.description,
      (select count(*)::int from runs r where r.org_id = s.org_id) as runs from skills s where s.org_id = ${owner.org.id} order by s.id`
      ),
    body: (route) =>
      route === 'PATCH /api/skills/:id'
        ? { description: 'attack', version: 1 }
        : route.startsWith('POST')
          ? { input: 'attack' }
          : undefined
  },
  {
    name: 'skill proposals',
    routes: ['POST /api/skills/proposals/:id/accept', 'POST /api/skills/proposals/:id/reject'],
    lists: ['GET /api/skills/proposals'],
    async seed(app, owner) {
      const skillMd = `---\nname: proposed-${owner.org.id
        .slice(-8)
        .toLowerCase()
        .replace(/[^a-z0-9]/g, 'x')}\ndescription: fixture\n---\n\nDo it.\n`
      const res = await app.inject({
        method: 'POST',
        url: '/api/skills/proposals',
        headers: { cookie: owner.cookie },
        payload: { skillMd }
      })
      return { id: (res.json() as { proposal: { id: string } }).proposal.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, state, skill_id from skill_proposals where org_id = ${owner.org.id} order by id`)
  },
  {
    name: 'playbooks',
    routes: [
      'GET /api/playbooks/:id',
      'PATCH /api/playbooks/:id',
      'DELETE /api/playbooks/:id',
      'POST /api/playbooks/:id/run'
    ],
    lists: ['GET /api/playbooks'],
    async seed(app, owner) {
      const skill = await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers: { cookie: owner.cookie },
        payload: { name: 'playbook-step', description: 'fixture', instructions: 'Step.' }
      })
      const skillId = (skill.json() as { skill: { id: string } }).skill.id
      const res = await app.inject({
        method: 'POST',
        url: '/api/playbooks',
        headers: { cookie: owner.cookie },
        payload: { name: `fixture ${owner.org.id}`, steps: [{ skillId }] }
      })
      return { id: (res.json() as { playbook: { id: string } }).playbook.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select p.id, p.name, (select count(*)::int from playbook_steps s where s.playbook_id = p.id) as steps,
      (select count(*)::int from playbook_runs r where r.org_id = p.org_id) as runs from playbooks p where p.org_id = ${owner.org.id} order by p.id`
      ),
    body: (route) =>
      route === 'PATCH /api/playbooks/:id' ? { name: 'attack' } : route.startsWith('POST') ? {} : undefined
  },
  {
    name: 'projects',
    routes: ['GET /api/projects/:id', 'PATCH /api/projects/:id', 'DELETE /api/projects/:id'],
    lists: ['GET /api/projects'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/projects',
        headers: { cookie: owner.cookie },
        payload: { name: `fixture ${owner.org.id}` }
      })
      return { id: (res.json() as { project: { id: string } }).project.id }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, name, archived_at from projects where org_id = ${owner.org.id} order by id`),
    body: (route) => (route === 'PATCH /api/projects/:id' ? { name: 'attack', archived: true } : undefined)
  },
  {
    name: 'tasks',
    routes: [
      'GET /api/tasks/:id',
      'PATCH /api/tasks/:id',
      'DELETE /api/tasks/:id',
      'POST /api/tasks/:id/move',
      'POST /api/tasks/:id/run'
    ],
    lists: ['GET /api/tasks'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/tasks',
        headers: { cookie: owner.cookie },
        payload: { title: `fixture ${owner.org.id}` }
      })
      return { id: (res.json() as { task: { id: string } }).task.id }
    },
    snapshot: (app, owner) =>
      rows(
        app,
        sql`select id, title, status, position, revision, run_id from tasks where org_id = ${owner.org.id} order by id`
      ),
    body: (route) =>
      route === 'PATCH /api/tasks/:id'
        ? { title: 'attack', revision: 1 }
        : route === 'POST /api/tasks/:id/move'
          ? { status: 'done', revision: 1 }
          : route.startsWith('POST')
            ? {}
            : undefined
  },
  {
    // a secret's name is the org's own namespace, not an id: the attacker's DELETE of the
    // victim's name finds nothing of its own (404) and the victim's secret stays
    name: 'secrets',
    routes: ['DELETE /api/secrets/:name'],
    lists: ['GET /api/secrets'],
    async seed(app, owner) {
      const name = `FIXTURE_${owner.org.id.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`
      const res = await app.inject({
        method: 'PUT',
        url: `/api/secrets/${name}`,
        headers: { cookie: owner.cookie },
        payload: { value: `value of ${owner.org.id}` }
      })
      if (res.statusCode !== 201) throw new Error(`secret fixture: ${res.statusCode} ${res.body}`)
      return { name }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select name, sealed, key_id from secrets where org_id = ${owner.org.id} order by name`)
  },
  {
    name: 'automations',
    routes: [
      'GET /api/automations/:id',
      'PATCH /api/automations/:id',
      'DELETE /api/automations/:id',
      'POST /api/automations/:id/trigger',
      'GET /api/automations/:id/fires'
    ],
    lists: ['GET /api/automations'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/automations',
        headers: { cookie: owner.cookie },
        payload: {
          name: `fixture ${owner.org.id}`,
          cron: '0 3 * * *',
          target: { prompt: `automation of ${owner.org.id}` }
        }
      })
      return { id: (res.json() as { automation: { id: string } }).automation.id }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select id, name, cron, enabled, next_fire_at from automations where org_id = ${owner.org.id} order by id`
      ),
      await rows(app, sql`select count(*)::int as n from runs where org_id = ${owner.org.id} and origin = 'automation'`)
    ],
    body: (route) =>
      route.startsWith('PATCH') ? { enabled: false, name: 'attack' } : route.startsWith('POST') ? {} : undefined
  },
  {
    // seeded in the database: the walk's app refuses private provider addresses, and the
    // attacker's calls must be 404s before any request to the provider could be made
    name: 'model providers',
    routes: ['DELETE /api/providers/:id', 'POST /api/providers/:id/check'],
    lists: ['GET /api/providers', 'GET /api/models', 'GET /api/models/embedding'],
    async seed(app, owner) {
      const id = newId()
      const model = `model-of-${owner.org.id}`
      await app.db.insert(providers).values({
        id,
        orgId: owner.org.id,
        name: `fixture ${owner.org.id}`,
        baseUrl: 'https://provider.example.test/v1',
        models: [model],
        modelsGiven: true,
        ready: true
      })
      await app.secrets.internal.put(owner.org.id, `provider:${id}:api_key`, `key of ${owner.org.id}`)
      return { id, model }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select id, name, base_url, models, ready, last_error, last_checked_at from providers where org_id = ${owner.org.id} order by id`
      ),
      await rows(
        app,
        sql`select name, sealed from secrets where org_id = ${owner.org.id} and name like 'cairn:provider:%' order by name`
      )
    ]
  },
  {
    // seeded in the database: the attacker's calls must be 404s before any connection to the
    // server could be made (its address is not even resolvable)
    name: 'mcp servers',
    routes: ['DELETE /api/mcp-servers/:id', 'POST /api/mcp-servers/:id/check'],
    lists: ['GET /api/mcp-servers'],
    async seed(app, owner) {
      const id = newId()
      await app.db.insert(mcpServers).values({
        id,
        orgId: owner.org.id,
        name: `fixture-${id.slice(-8)}`,
        url: 'https://mcp.example.test/mcp',
        headerNames: ['authorization'],
        ready: true,
        tools: [{ name: 'lookup', description: null, inputSchema: { type: 'object' } }]
      })
      await app.secrets.internal.put(owner.org.id, `mcp:${id}:header:authorization`, `Bearer token of ${owner.org.id}`)
      return { id }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select id, name, url, ready, last_error, last_checked_at, tools from mcp_servers where org_id = ${owner.org.id} order by id`
      ),
      await rows(
        app,
        sql`select name, sealed from secrets where org_id = ${owner.org.id} and name like 'cairn:mcp:%' order by name`
      )
    ]
  },
  {
    // the app must use the fixture GitHub (GITHUB_API_URL = (await fixtureGitHub()).url); each
    // org connects its own account, and a repository with a pull request. Owner and name are
    // GitHub's, not ids of ours: the attacker's token cannot read the victim's repository (404),
    // and neither its list nor its cached answers ever show the victim's
    name: 'github',
    routes: ['GET /api/github/repos/:owner/:repo/pulls'],
    lists: ['GET /api/github/repos', 'GET /api/integrations'],
    async seed(app, owner) {
      const github = await fixtureGitHub()
      const login = `login-${owner.org.id
        .slice(-10)
        .toLowerCase()
        .replace(/[^a-z0-9]/g, 'x')}`
      const account = github.addAccount(login)
      const repo = github.addRepo(login, `repo-${login}`, {
        files: {
          'README.md': `# ${owner.org.id}\n`,
          'skills/fixture/SKILL.md': '---\nname: gh-fixture\ndescription: fixture\n---\nDo.\n'
        }
      })
      github.addPull(repo, { title: `pull of ${owner.org.id}` })
      const res = await app.inject({
        method: 'PUT',
        url: '/api/integrations/github',
        headers: { cookie: owner.cookie },
        payload: { token: account.token }
      })
      if (res.statusCode !== 200) throw new Error(`github fixture: ${res.statusCode} ${res.body}`)
      // the owner's own lists fill the cache, which the attacker must never be served
      await app.inject({ method: 'GET', url: '/api/github/repos', headers: { cookie: owner.cookie } })
      await app.inject({
        method: 'GET',
        url: `/api/github/repos/${login}/${repo.name}/pulls`,
        headers: { cookie: owner.cookie }
      })
      return { owner: login, repo: repo.name }
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select kind, account, last_error from integrations where org_id = ${owner.org.id} order by kind`
      ),
      await rows(app, sql`select request, etag from github_cache where org_id = ${owner.org.id} order by request`),
      await rows(
        app,
        sql`select name from secrets where org_id = ${owner.org.id} and name like 'cairn:%' order by name`
      )
    ]
  },
  {
    name: 'agent runtime',
    routes: [
      'GET /api/runs/:id/approvals',
      'POST /api/runs/:id/approvals/:approvalId',
      'GET /api/runs/:id/terminal',
      'GET /api/desktop-proxy/:threadId/websockify'
    ],
    lists: ['GET /api/tools/policies'],
    async seed(app, owner) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'runtime fixture' }
      })
      const { run } = res.json() as { run: { id: string; rootRunId: string } }
      // a pending approval as a waiting tool call leaves it (no model is needed to make one)
      const approvalId = newId()
      await app.db.insert(toolApprovals).values({
        id: approvalId,
        orgId: owner.org.id,
        runId: run.id,
        rootRunId: run.rootRunId,
        callId: 'call_fixture',
        tool: 'shell',
        arguments: { command: 'true' },
        expiresAt: new Date(Date.now() + 3_600_000)
      })
      return { id: run.id, approvalId, threadId: run.rootRunId }
    },
    snapshot: (app, owner) =>
      rows(app, sql`select id, status, decided_by from tool_approvals where org_id = ${owner.org.id} order by id`),
    body(route) {
      return route.startsWith('POST') ? { decision: 'approve' } : undefined
    }
  },
  {
    name: 'memory hub',
    routes: [
      'PATCH /api/memory/item/:id',
      'DELETE /api/memory/item/:id',
      'GET /api/memory/item/:id/history',
      'POST /api/memory/item/:id/embed',
      'POST /api/memory/captures/:runId/retry',
      'POST /api/memory/captures/:runId/resolve'
    ],
    lists: [
      'GET /api/memory/browse',
      'GET /api/memory/search?q=fixture',
      'GET /api/memory/search?q=fixture&mode=semantic',
      'GET /api/memory/captures',
      'GET /api/memory/recalls'
    ],
    async seed(app, owner) {
      // a real run: echo recalls, then captures the sentence with "remember", and the
      // outbox delivers it into the org pool
      const res = await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: `Remember the fixture door of ${owner.org.id}.`, engine: 'echo' }
      })
      const { run } = res.json() as { run: { id: string } }
      for (let i = 0; i < 200; i++) {
        const browse = await app.inject({ method: 'GET', url: '/api/memory/browse', headers: { cookie: owner.cookie } })
        const item = (browse.json() as { items: Array<{ id: string; sourceRunId: string | null }> }).items.find(
          (it) => it.sourceRunId === run.id
        )
        if (item) return { id: item.id, runId: run.id }
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      throw new Error('the fixture fact was never delivered')
    },
    snapshot: async (app, owner) => [
      await rows(
        app,
        sql`select i.id, i.content from memory_items i join memory_pools p on p.id = i.pool_id where p.org_id = ${owner.org.id} order by i.id`
      ),
      await rows(
        app,
        sql`select run_id, state, attempts from memory_captures where org_id = ${owner.org.id} order by run_id`
      ),
      await rows(
        app,
        sql`select kind, item_id, state, attempts from embeddings where org_id = ${owner.org.id} order by kind, item_id`
      )
    ],
    body(route) {
      if (route.startsWith('PATCH')) return { content: 'overwritten by another org' }
      if (route.endsWith('/resolve')) return { resolution: 'discard' }
      return route.startsWith('POST') ? {} : undefined
    }
  }
]

/** A signed-up user with an org of their own and a key for it. */
export async function makeActor(app: FastifyInstance, name: string): Promise<Actor> {
  const owner = await signUpWithOrg(app, { name, org: `${name} org` })
  const { authorization } = await mintKey(app, owner.cookie, `${name} key`)
  return { ...owner, authorization }
}

export function fillParams(pattern: string, params: Record<string, string>): string {
  return pattern.replace(/:([A-Za-z0-9_]+)/g, (_m, name: string) => {
    const value = params[name]
    if (value === undefined) throw new Error(`the fixture gave no value for :${name} in ${pattern}`)
    return encodeURIComponent(value)
  })
}

export interface WalkFinding {
  route: string
  caller: 'session' | 'key'
  status: number
  ok: boolean
  detail: string
}

/** Runs every fixture: the attacker against the victim's ids and lists. */
export async function walkTenantIsolation(
  app: FastifyInstance,
  attacker: Actor,
  victim: Actor
): Promise<WalkFinding[]> {
  const findings: WalkFinding[] = []
  for (const fixture of TENANT_FIXTURES) {
    await fixture.seed(app, attacker) // the attacker has data of its own, so lists are not trivially empty
    const params = await fixture.seed(app, victim)
    const victimIds = Object.values(params).filter(
      (v) => v.length >= 8 && v !== attacker.org.id && v !== attacker.user.id
    )
    const before = JSON.stringify(await fixture.snapshot(app, victim))
    for (const route of fixture.routes) {
      const [method, pattern] = route.split(' ') as [string, string]
      const body = fixture.body?.(route, attacker)
      for (const [caller, headers] of [
        ['session', { cookie: attacker.cookie }],
        ['key', { authorization: attacker.authorization }]
      ] as const) {
        const res = await app.inject({
          method: method as 'GET',
          url: fillParams(pattern, params),
          headers,
          ...(body === undefined ? {} : { payload: body as object })
        })
        const ok = res.statusCode === 404 || res.statusCode === 401 || res.statusCode === 403
        findings.push({
          route: `${fixture.name}: ${route}`,
          caller,
          status: res.statusCode,
          ok,
          detail: res.body.slice(0, 200)
        })
      }
    }
    const after = JSON.stringify(await fixture.snapshot(app, victim))
    findings.push({
      route: `${fixture.name}: victim rows unchanged`,
      caller: 'session',
      status: 0,
      ok: before === after,
      detail: `${before} → ${after}`
    })
    for (const route of fixture.lists) {
      const [method, url] = route.split(' ') as [string, string]
      for (const [caller, headers] of [
        ['session', { cookie: attacker.cookie }],
        ['key', { authorization: attacker.authorization }]
      ] as const) {
        const res = await app.inject({ method: method as 'GET', url, headers })
        const leaked = [...victimIds, victim.org.id].filter((id) => res.body.includes(id))
        findings.push({
          route: `${fixture.name}: ${route} (list)`,
          caller,
          status: res.statusCode,
          ok: leaked.length === 0 && res.statusCode < 500,
          detail: leaked.join(', ')
        })
      }
    }
  }
  return findings
}
