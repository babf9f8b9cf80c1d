import { sql } from 'drizzle-orm'
import { fixtureGitHub } from './fake-github.js'
import { rows, type TenantFixture } from '../tenancy/walk.js'

/** The tenancy walk's fixtures of this group (test/tenancy/walk.ts). */
export const tenantFixtures: TenantFixture[] = [
  {
    // the app must use the fixture GitHub (GITHUB_API_URL = (await fixtureGitHub()).url); each
    // org connects its own account, and a repository with a pull request. Owner and name are
    // GitHub's, not ids of ours: the attacker's token cannot read the victim's repository (404),
    // and neither its list nor its cached answers ever show the victim's
    name: 'github',
    families: ['/api/github/repos/:id'],
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
  }
]
