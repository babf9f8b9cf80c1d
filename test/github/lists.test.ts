import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { mintKey, secondHandle, signUpWithOrg, type SignedIn, type TestOrg } from '../helper.js'
import { startFakeGitHub, type FakeAccount } from './fake-github.js'
import { buildGitHubApp } from './group.js'

/**
 * GitHub reads: repositories and pull requests, paged (GitHub's page and
 * Link header behind an opaque cursor), conditional requests (ETag, 304s counted at the
 * fake), rate limits as 503 with Retry-After, a revoked token as 502 with lastError.
 */
const SECRETS_KEY = newKeyText()
const github = await startFakeGitHub(t)
const env = { GITHUB_API_URL: github.url, SECRETS_KEY }
const app = await buildGitHubApp(t, { env })

type Owner = SignedIn & { org: TestOrg }

async function connected(login: string): Promise<{ owner: Owner; account: FakeAccount }> {
  const owner = await signUpWithOrg(app)
  const account = github.addAccount(login)
  const res = await app.inject({
    method: 'PUT',
    url: '/api/integrations/github',
    headers: { cookie: owner.cookie },
    payload: { token: account.token }
  })
  if (res.statusCode !== 200) throw new Error(`connect: ${res.statusCode} ${res.body}`)
  return { owner, account }
}
const get = (url: string, headers: Record<string, string>) => app.inject({ method: 'GET', url, headers })

t.test('repositories: paged through Link, only what the token can read, the wire shape', async (t) => {
  const { owner } = await connected('pager')
  for (const name of ['echo', 'alpha', 'delta', 'charlie', 'bravo'])
    github.addRepo('pager', name, { description: `the ${name} repo` })
  github.addRepo('pager', 'secret', { private: true })
  github.addRepo('someone-else', 'theirs')
  const shared = github.addRepo('someone-else', 'shared')
  shared.collaborators.add('pager')

  const seen: string[] = []
  let cursor: string | null = null
  let pages = 0
  do {
    const res = await get(`/api/github/repos?limit=3${cursor ? `&cursor=${cursor}` : ''}`, { cookie: owner.cookie })
    t.equal(res.statusCode, 200, res.body)
    const body = res.json() as { items: Array<{ fullName: string }>; nextCursor: string | null }
    t.ok(body.items.length <= 3)
    seen.push(...body.items.map((r) => r.fullName))
    cursor = body.nextCursor
    pages++
  } while (cursor && pages < 10)
  t.same(seen, [
    'pager/alpha',
    'pager/bravo',
    'pager/charlie',
    'pager/delta',
    'pager/echo',
    'pager/secret',
    'someone-else/shared'
  ])
  t.equal(pages, 3)
  t.notOk(seen.includes('someone-else/theirs'), "another account's repository is not listed")

  const first = (await get('/api/github/repos?limit=1', { cookie: owner.cookie })).json()
  const repo = github.repos.get('pager/alpha')!
  t.same(first.items[0], {
    id: String(repo.id),
    fullName: 'pager/alpha',
    owner: 'pager',
    name: 'alpha',
    private: false,
    defaultBranch: 'main',
    description: 'the alpha repo',
    htmlUrl: 'https://github.example/pager/alpha',
    updatedAt: '2025-06-01T00:00:00Z'
  })
  t.type(first.nextCursor, 'string')

  // a cursor that is not a page of this listing is refused, and GitHub is not asked
  const asked = github.log.length
  for (const cursor of [
    'bm90LWEtY3Vyc29y',
    Buffer.from('0.3').toString('base64url'),
    Buffer.from('2.3.4').toString('base64url'),
    '!!',
    ''
  ]) {
    const junk = await get(`/api/github/repos?limit=2&cursor=${encodeURIComponent(cursor)}`, { cookie: owner.cookie })
    t.equal(junk.statusCode, 400, `cursor ${cursor}`)
    t.equal(junk.json().error, 'validation_failed')
    t.same(
      junk.json().details.map((d: { path: string }) => d.path),
      ['/querystring/cursor']
    )
  }
  t.equal(github.log.length, asked, 'GitHub was not asked')
  // above GitHub's largest page: pages of 100
  const big = await get('/api/github/repos?limit=200', { cookie: owner.cookie })
  t.equal(big.statusCode, 200)
  t.match(github.log.at(-1)!.query, /per_page=100/)
})

t.test(
  'conditional requests: a repeated list is a 304 at GitHub (counted there) and the same answer; instances share the cache',
  async (t) => {
    const { owner } = await connected('etagger')
    github.addRepo('etagger', 'one')
    const path = '/user/repos'
    const full = () => github.log.filter((l) => l.path === path && l.status === 200 && l.token !== null).length
    const notModified = () => github.log.filter((l) => l.path === path && l.status === 304).length
    const [full0, nm0] = [full(), notModified()]

    const first = await get('/api/github/repos', { cookie: owner.cookie })
    t.equal(first.statusCode, 200)
    t.equal(full() - full0, 1, 'the first list is a full answer')
    t.equal(notModified() - nm0, 0)
    const cached = rowsOf<{ request: string; etag: string }>(
      await app.db.execute(sql`select request, etag from github_cache where org_id = ${owner.org.id}`)
    )
    t.equal(cached.length, 1)
    t.match(cached[0]!.etag, /^W\/"[0-9a-f]+"$/)

    const second = await get('/api/github/repos', { cookie: owner.cookie })
    t.equal(second.statusCode, 200)
    t.equal(second.body, first.body, 'the same answer')
    t.equal(full() - full0, 1, 'no second full answer')
    t.equal(notModified() - nm0, 1, 'GitHub answered 304 (not counted against its rate limit)')
    t.equal(github.log.filter((l) => l.path === path).at(-1)!.status, 304)

    // a second instance on the same database answers from the same cache
    const other = await buildGitHubApp(t, { env, db: await secondHandle(t, app.testDb) })
    const third = await other.inject({ method: 'GET', url: '/api/github/repos', headers: { cookie: owner.cookie } })
    t.equal(third.statusCode, 200)
    t.equal(third.body, first.body)
    t.equal(notModified() - nm0, 2, 'the other instance sent the stored ETag')
    t.equal(full() - full0, 1)

    // a change at GitHub: a new ETag, a full answer, the new item
    github.addRepo('etagger', 'two')
    const fourth = await get('/api/github/repos', { cookie: owner.cookie })
    t.same(
      fourth.json().items.map((r: { name: string }) => r.name),
      ['one', 'two']
    )
    t.equal(full() - full0, 2)
    const fifth = await get('/api/github/repos', { cookie: owner.cookie })
    t.equal(fifth.body, fourth.body)
    t.equal(notModified() - nm0, 3)
  }
)

t.test(
  'pull requests: state filter, paging, 304s, 404 for a repository the token cannot read, 400s ask GitHub nothing',
  async (t) => {
    const { owner } = await connected('puller')
    const repo = github.addRepo('puller', 'app')
    github.addPull(repo, { title: 'First', author: 'ann', head: 'feat-a' })
    github.addPull(repo, { title: 'Second', state: 'closed', merged: true })
    github.addPull(repo, { title: 'Third', draft: true })
    github.addPull(repo, { title: 'Fourth', state: 'closed' })
    github.addRepo('stranger', 'hidden')

    const open = await get('/api/github/repos/puller/app/pulls', { cookie: owner.cookie })
    t.equal(open.statusCode, 200, open.body)
    t.same(
      open.json().items.map((p: { number: number }) => p.number),
      [3, 1],
      'open by default, newest first'
    )
    t.same(open.json().items[1], {
      id: String(repo.id * 1000 + 1),
      number: 1,
      title: 'First',
      state: 'open',
      draft: false,
      merged: false,
      author: 'ann',
      headRef: 'feat-a',
      baseRef: 'main',
      htmlUrl: 'https://github.example/puller/app/pull/1',
      createdAt: '2025-01-01T00:00:00Z',
      updatedAt: '2025-01-02T00:00:00Z',
      closedAt: null,
      mergedAt: null
    })
    t.equal(open.json().items[0].draft, true)
    const closed = (await get('/api/github/repos/puller/app/pulls?state=closed', { cookie: owner.cookie })).json()
    t.same(
      closed.items.map((p: { number: number; merged: boolean }) => [p.number, p.merged]),
      [
        [4, false],
        [2, true]
      ]
    )
    const all = await get('/api/github/repos/puller/app/pulls?state=all&limit=3', { cookie: owner.cookie })
    t.same(
      all.json().items.map((p: { number: number }) => p.number),
      [4, 3, 2]
    )
    const rest = await get(`/api/github/repos/puller/app/pulls?state=all&limit=3&cursor=${all.json().nextCursor}`, {
      cookie: owner.cookie
    })
    t.same(
      rest.json().items.map((p: { number: number }) => p.number),
      [1]
    )
    t.equal(rest.json().nextCursor, null)

    const path = '/repos/puller/app/pulls'
    const before = github.count(path, 304)
    const again = await get('/api/github/repos/puller/app/pulls', { cookie: owner.cookie })
    t.equal(again.body, open.body)
    t.equal(github.count(path, 304), before + 1, 'the repeated list was a 304 at GitHub')

    for (const url of ['/api/github/repos/stranger/hidden/pulls', '/api/github/repos/puller/nope/pulls']) {
      const res = await get(url, { cookie: owner.cookie })
      t.equal(res.statusCode, 404, url)
      t.equal(res.json().error, 'not_found')
    }

    const asked = github.log.length
    for (const url of [
      '/api/github/repos/puller/app/pulls?state=merged',
      '/api/github/repos/puller/app/pulls?limit=0',
      '/api/github/repos/puller/app/pulls?limit=201',
      '/api/github/repos/puller/app/pulls?unknown=1',
      '/api/github/repos/-bad-/app/pulls',
      '/api/github/repos/puller/../pulls',
      '/api/github/repos/puller/a%2Fb/pulls',
      `/api/github/repos/${'o'.repeat(40)}/app/pulls`
    ]) {
      const res = await get(url, { cookie: owner.cookie })
      t.ok(res.statusCode === 400 || res.statusCode === 404, `${url}: ${res.statusCode}`)
      if (res.statusCode === 400) t.equal(res.json().error, 'validation_failed', url)
    }
    t.equal(github.log.length, asked, 'GitHub was not asked')
  }
)

t.test(
  'a pull request GitHub sends without closed_at or merged_at (or cached so) is open and unmerged, never a 5xx',
  async (t) => {
    const { owner } = await connected('sparse')
    const repo = github.addRepo('sparse', 'app')
    github.addPull(repo, { title: 'Bare', omit: ['closed_at', 'merged_at', 'draft', 'user'] })
    github.addPull(repo, { title: 'Closed, merged_at left out', state: 'closed', omit: ['merged_at'] })
    const list = await get('/api/github/repos/sparse/app/pulls?state=all', { cookie: owner.cookie })
    t.equal(list.statusCode, 200, list.body)
    const [closed, bare] = list.json().items
    t.same(bare, {
      id: String(repo.id * 1000 + 1),
      number: 1,
      title: 'Bare',
      state: 'open',
      draft: false,
      merged: false,
      author: null,
      headRef: 'branch-1',
      baseRef: 'main',
      htmlUrl: 'https://github.example/sparse/app/pull/1',
      createdAt: '2025-01-01T00:00:00Z',
      updatedAt: '2025-01-02T00:00:00Z',
      closedAt: null,
      mergedAt: null
    })
    t.match(closed, { number: 2, state: 'closed', merged: false, closedAt: '2025-10-01T00:00:00Z', mergedAt: null })

    // a record an earlier release cached from such a payload: no closedAt or mergedAt, and
    // counted as merged; GitHub answers 304, so the answer comes from that record
    const request = 'GET /repos/sparse/app/pulls?state=all&per_page=50&page=1'
    const updated = rowsOf(
      await app.db.execute(sql`
    update github_cache set body = jsonb_set(body, '{items}', (
      select jsonb_agg(((i - 'closedAt') - 'mergedAt') || '{"merged": true}'::jsonb) from jsonb_array_elements(body->'items') i))
    where org_id = ${owner.org.id} and request = ${request} returning request`)
    )
    t.equal(updated.length, 1, 'the cached record is the one the list reads')
    const before = github.count('/repos/sparse/app/pulls', 304)
    const cached = await get('/api/github/repos/sparse/app/pulls?state=all', { cookie: owner.cookie })
    t.equal(github.count('/repos/sparse/app/pulls', 304), before + 1, 'answered from the cache')
    t.equal(cached.statusCode, 200, cached.body)
    t.match(cached.json().items, [
      { number: 2, merged: false, closedAt: null, mergedAt: null },
      { number: 1, merged: false, closedAt: null, mergedAt: null }
    ])
  }
)

t.test("an API key lists repositories and pulls (key routes); the org is the key's", async (t) => {
  const { owner } = await connected('keyed')
  const repo = github.addRepo('keyed', 'svc')
  github.addPull(repo, { title: 'By key' })
  const { authorization } = await mintKey(app, owner.cookie)
  const repos = await get('/api/github/repos', { authorization })
  t.equal(repos.statusCode, 200)
  t.same(
    repos.json().items.map((r: { fullName: string }) => r.fullName),
    ['keyed/svc']
  )
  const pulls = await get('/api/github/repos/keyed/svc/pulls', { authorization })
  t.equal(pulls.statusCode, 200)
  t.equal(pulls.json().items[0].title, 'By key')
})

t.test(
  "GitHub's rate limits: 503 upstream_rate_limited with Retry-After, whichever limit; the cache is untouched",
  async (t) => {
    const { owner } = await connected('limited')
    github.addRepo('limited', 'r')
    const ok = await get('/api/github/repos', { cookie: owner.cookie })
    t.equal(ok.statusCode, 200)
    const cacheBefore = JSON.stringify(
      rowsOf(await app.db.execute(sql`select request, etag, body from github_cache where org_id = ${owner.org.id}`))
    )

    const cases: Array<[NonNullable<typeof github.limit>, (v: number) => boolean, string]> = [
      [{ kind: 'primary', resetInSeconds: 600 }, (v) => v >= 598 && v <= 602, 'primary: until x-ratelimit-reset'],
      [{ kind: 'secondary', retryAfter: 45 }, (v) => v === 45, 'secondary: its retry-after'],
      [{ kind: 'secondary' }, (v) => v === 60, 'secondary without retry-after: a minute'],
      [{ kind: '429', retryAfter: 7 }, (v) => v === 7, '429: its retry-after']
    ]
    for (const [limit, expected, name] of cases) {
      github.limit = limit
      for (const url of ['/api/github/repos', '/api/github/repos/limited/r/pulls']) {
        const res = await get(url, { cookie: owner.cookie })
        t.equal(res.statusCode, 503, `${name}: ${url}`)
        t.equal(res.json().error, 'upstream_rate_limited')
        t.match(res.json().message, /GitHub/)
        const wait = Number(res.headers['retry-after'])
        t.ok(Number.isInteger(wait) && expected(wait), `${name}: Retry-After ${res.headers['retry-after']}`)
      }
    }
    github.limit = null
    t.equal(
      JSON.stringify(
        rowsOf(await app.db.execute(sql`select request, etag, body from github_cache where org_id = ${owner.org.id}`))
      ),
      cacheBefore
    )
    const integration = (await get('/api/integrations', { cookie: owner.cookie }))
      .json()
      .items.find((i: { kind: string }) => i.kind === 'github')
    t.equal(integration.lastError, null, 'a rate limit is not a broken connection')
    t.equal(
      (await get('/api/github/repos', { cookie: owner.cookie })).statusCode,
      200,
      'and it works again once the limit is over'
    )
  }
)

t.test(
  'a 401: re-verified once with GET /user; a revoked token is 502 with lastError, cleared when a call works again',
  async (t) => {
    const { owner, account } = await connected('revoker')
    github.addRepo('revoker', 'r')
    const githubIntegration = async () =>
      (await get('/api/integrations', { cookie: owner.cookie }))
        .json()
        .items.find((i: { kind: string }) => i.kind === 'github')

    // a 401 of one request while the token is fine: /user says so, the request is retried once
    const users = github.count('/user', 200)
    github.failNext(/^\/user\/repos$/, 401, { message: 'Bad credentials' })
    const flaky = await get('/api/github/repos', { cookie: owner.cookie })
    t.equal(flaky.statusCode, 200, flaky.body)
    t.equal(github.count('/user', 200), users + 1, 'the token was re-verified once')
    t.equal((await githubIntegration()).lastError, null)

    // revoked: 502 upstream_failed saying to reconnect, and lastError set
    github.revoke(account.token)
    const revoked = await get('/api/github/repos', { cookie: owner.cookie })
    t.equal(revoked.statusCode, 502)
    t.equal(revoked.json().error, 'upstream_failed')
    t.match(revoked.json().message, /revoked or has expired/)
    t.match(revoked.json().message, /PUT \/api\/integrations\/github/)
    t.equal(github.count('/user', 401), 1, 'one re-verification')
    const broken = await githubIntegration()
    t.equal(broken.connected, true, 'still connected: an admin decides')
    t.match(broken.lastError, /revoked or has expired/)
    const pulls = await get('/api/github/repos/revoker/r/pulls', { cookie: owner.cookie })
    t.equal(pulls.statusCode, 502)

    // the token works again (GitHub restored it): the next call clears lastError
    github.accounts.set(account.token, account)
    t.equal((await get('/api/github/repos', { cookie: owner.cookie })).statusCode, 200)
    t.equal((await githubIntegration()).lastError, null)

    // revoked again, then reconnected with a new token: lastError is cleared by the connect
    github.revoke(account.token)
    t.equal((await get('/api/github/repos', { cookie: owner.cookie })).statusCode, 502)
    const fresh = github.addAccount('revoker')
    const reconnect = await app.inject({
      method: 'PUT',
      url: '/api/integrations/github',
      headers: { cookie: owner.cookie },
      payload: { token: fresh.token }
    })
    t.equal(reconnect.json().integration.lastError, null)
    t.equal((await get('/api/github/repos', { cookie: owner.cookie })).statusCode, 200)
  }
)

t.test('GitHub failing otherwise: 502 upstream_failed naming GitHub, never a 500', async (t) => {
  const { owner } = await connected('failing')
  github.addRepo('failing', 'r')
  github.failNext(/^\/user\/repos$/, 500, { message: 'Server Error' })
  const res = await get('/api/github/repos', { cookie: owner.cookie })
  t.equal(res.statusCode, 502)
  t.equal(res.json().error, 'upstream_failed')
  t.match(res.json().message, /GitHub answered 500/)
  github.failNext(/^\/repos\/failing\/r\/pulls$/, 403, { message: 'Resource not accessible by personal access token' })
  const forbidden = await get('/api/github/repos/failing/r/pulls', { cookie: owner.cookie })
  t.equal(forbidden.statusCode, 502)
  t.match(forbidden.json().message, /403.*Resource not accessible/)
})

t.test("orgs never see each other's lists or cached answers", async (t) => {
  const a = await connected('tenant-a')
  const b = await connected('tenant-b')
  github.addRepo('tenant-a', 'a-only')
  github.addRepo('tenant-b', 'b-only')
  const listA = await get('/api/github/repos', { cookie: a.owner.cookie })
  const listB = await get('/api/github/repos', { cookie: b.owner.cookie })
  t.same(
    listA.json().items.map((r: { fullName: string }) => r.fullName),
    ['tenant-a/a-only']
  )
  t.same(
    listB.json().items.map((r: { fullName: string }) => r.fullName),
    ['tenant-b/b-only']
  )
  // the same request key, each org its own cached answer
  t.same(
    listA.json().items.map((r: { fullName: string }) => r.fullName),
    (await get('/api/github/repos', { cookie: a.owner.cookie }))
      .json()
      .items.map((r: { fullName: string }) => r.fullName)
  )
  const bPulls = await get('/api/github/repos/tenant-b/b-only/pulls', { cookie: a.owner.cookie })
  t.equal(bPulls.statusCode, 404, "org A's token cannot read org B's repository")
})
