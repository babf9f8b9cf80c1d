import { createHash, randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/**
 * A real HTTP server speaking the part of GitHub's REST API Cairn uses: GET /user,
 * /user/repos (Link paging, ETag and If-None-Match → 304), /repos/:o/:r,
 * /repos/:o/:r/pulls, /repos/:o/:r/commits/:ref (JSON or the `sha` media type),
 * /repos/:o/:r/git/trees/:sha?recursive=1 and /repos/:o/:r/contents/:path?ref= (base64).
 * Tokens map to accounts; a repository is visible to its owner and collaborators (others
 * get 404, as on GitHub). It counts what it answered (200s and 304s per path), and can
 * answer with GitHub's rate limits (primary 403, secondary 403, 429) or a 401.
 */

export interface FakeAccount {
  token: string
  login: string
  id: number
}

export interface FakePull {
  number: number
  title: string
  state: 'open' | 'closed'
  merged: boolean
  draft: boolean
  author: string
  head: string
  base: string
  /** fields GitHub's answer leaves out (some payloads omit what is null) */
  omit?: Array<'closed_at' | 'merged_at' | 'draft' | 'user'>
}

export interface FakeRepo {
  id: number
  owner: string
  name: string
  private: boolean
  description: string | null
  defaultBranch: string
  branches: Map<string, string>
  /** commit SHA -> its files (path -> content) */
  commits: Map<string, Map<string, string>>
  pulls: FakePull[]
  collaborators: Set<string>
}

export interface Logged {
  method: string
  path: string
  query: string
  status: number
  token: string | null
}

type Limit =
  | { kind: 'primary'; resetInSeconds: number }
  | { kind: 'secondary'; retryAfter?: number }
  | { kind: '429'; retryAfter: number }

interface OneShot {
  path: RegExp
  status: number
  body: unknown
  headers?: Record<string, string>
}

const gitBlobSha = (content: string) => {
  const bytes = Buffer.from(content, 'utf8')
  return createHash('sha1').update(`blob ${bytes.length}\u0000`).update(bytes).digest('hex')
}

export class FakeGitHub {
  url = ''
  readonly accounts = new Map<string, FakeAccount>()
  readonly repos = new Map<string, FakeRepo>()
  readonly log: Logged[] = []
  /** while set, every request is answered with this rate limit */
  limit: Limit | null = null
  private readonly oneShots: OneShot[] = []
  private server: Server | null = null
  private nextId = 1000

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        res.statusCode = 500
        res.end(JSON.stringify({ message: String(err) }))
      })
    })
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
    return this
  }

  async close(): Promise<void> {
    const server = this.server
    if (!server) return
    this.server = null
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  /** Lets the process end while the server still listens (a fixture shared by a whole test file). */
  unref(): this {
    this.server?.unref()
    return this
  }

  addAccount(login: string, token = `ghp_${randomBytes(18).toString('hex')}`): FakeAccount {
    const account = { token, login, id: this.nextId++ }
    this.accounts.set(token, account)
    return account
  }

  /** Revokes a token: every request with it is a 401 from now on. */
  revoke(token: string): void {
    this.accounts.delete(token)
  }

  addRepo(
    owner: string,
    name: string,
    opts: { files?: Record<string, string>; private?: boolean; description?: string; defaultBranch?: string } = {}
  ): FakeRepo {
    const repo: FakeRepo = {
      id: this.nextId++,
      owner,
      name,
      private: opts.private ?? false,
      description: opts.description ?? null,
      defaultBranch: opts.defaultBranch ?? 'main',
      branches: new Map(),
      commits: new Map(),
      pulls: [],
      collaborators: new Set()
    }
    this.repos.set(`${owner}/${name}`.toLowerCase(), repo)
    this.commit(repo, opts.files ?? { 'README.md': `# ${name}\n` })
    return repo
  }

  /** A new commit on a branch (default: the default branch): files changed, added, or (null) deleted. Its SHA. */
  commit(repo: FakeRepo, changes: Record<string, string | null>, branch = repo.defaultBranch): string {
    const head = repo.branches.get(branch)
    const files = new Map(head ? repo.commits.get(head)! : [])
    for (const [path, content] of Object.entries(changes)) {
      if (content === null) files.delete(path)
      else files.set(path, content)
    }
    const sha = createHash('sha1')
      .update(`${repo.owner}/${repo.name}:${branch}:${this.nextId++}:${randomBytes(8).toString('hex')}`)
      .digest('hex')
    repo.commits.set(sha, files)
    repo.branches.set(branch, sha)
    return sha
  }

  addPull(repo: FakeRepo, pull: Partial<FakePull> & { title: string }): FakePull {
    const full: FakePull = {
      number: repo.pulls.length + 1,
      state: 'open',
      merged: false,
      draft: false,
      author: repo.owner,
      head: `branch-${repo.pulls.length + 1}`,
      base: repo.defaultBranch,
      ...pull
    }
    repo.pulls.push(full)
    return full
  }

  /** The next request whose path matches gets this answer instead (once). */
  failNext(
    path: RegExp,
    status: number,
    body: unknown = { message: 'fake failure' },
    headers: Record<string, string> = {}
  ): void {
    this.oneShots.push({ path, status, body, headers })
  }

  /** How many requests for this path (no query) were answered with this status. */
  count(path: string, status: number): number {
    return this.log.filter((l) => l.path === path && l.status === status).length
  }

  // ---- the protocol ----------------------------------------------------------------

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake')
    const auth = req.headers.authorization ?? ''
    const token = /^(?:token|bearer)\s+(.+)$/i.exec(auth)?.[1] ?? null
    const entry: Logged = { method: req.method ?? 'GET', path: url.pathname, query: url.search, status: 0, token }
    this.log.push(entry)
    const send = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      entry.status = status
      res.statusCode = status
      res.setHeader('x-ratelimit-limit', '5000')
      if (!('x-ratelimit-remaining' in headers)) res.setHeader('x-ratelimit-remaining', '4999')
      for (const [k, v] of Object.entries(headers)) res.setHeader(k, v)
      if (status === 304 || body === undefined) {
        res.end()
      } else if (typeof body === 'string') {
        if (!('content-type' in headers)) res.setHeader('content-type', 'text/plain; charset=utf-8')
        res.end(body)
      } else {
        res.setHeader('content-type', 'application/json; charset=utf-8')
        res.end(JSON.stringify(body))
      }
    }

    const shot = this.oneShots.findIndex((s) => s.path.test(url.pathname))
    if (shot >= 0) {
      const [one] = this.oneShots.splice(shot, 1)
      return send(one!.status, one!.body, one!.headers)
    }
    if (this.limit) return this.sendLimit(send)
    const account = token ? this.accounts.get(token) : undefined
    if (!account) return send(401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' })
    if (req.method !== 'GET') return send(404, { message: 'Not Found' })

    // a JSON answer with an ETag; If-None-Match with the same ETag is a 304
    const listOrObject = (body: unknown, headers: Record<string, string> = {}) => {
      const etag = `W/"${createHash('sha1').update(JSON.stringify(body)).digest('hex')}"`
      if (req.headers['if-none-match'] === etag) return send(304, undefined, { etag, ...headers })
      return send(200, body, { etag, ...headers })
    }
    const page = (items: unknown[]) => {
      const perPage = Math.min(100, Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30))
      const number = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1)
      const slice = items.slice((number - 1) * perPage, number * perPage)
      const last = Math.max(1, Math.ceil(items.length / perPage))
      const linkTo = (n: number) => {
        const next = new URL(url.toString())
        next.searchParams.set('page', String(n))
        next.searchParams.set('per_page', String(perPage))
        return `<${this.url}${next.pathname}${next.search}>`
      }
      const links = [
        ...(number < last ? [`${linkTo(number + 1)}; rel="next"`, `${linkTo(last)}; rel="last"`] : []),
        ...(number > 1 ? [`${linkTo(1)}; rel="first"`, `${linkTo(number - 1)}; rel="prev"`] : [])
      ]
      return listOrObject(slice, links.length > 0 ? { link: links.join(', ') } : {})
    }

    const parts = url.pathname
      .split('/')
      .filter(Boolean)
      .map((p) => decodeURIComponent(p))
    if (parts.length === 1 && parts[0] === 'user')
      return send(200, { login: account.login, id: account.id, type: 'User' })
    if (parts.length === 2 && parts[0] === 'user' && parts[1] === 'repos') {
      const visible = [...this.repos.values()]
        .filter((r) => this.canRead(account, r))
        .sort((a, b) => this.fullName(a).localeCompare(this.fullName(b)))
      return page(visible.map((r) => this.repoJson(r)))
    }
    if (parts[0] !== 'repos' || parts.length < 3) return send(404, { message: 'Not Found' })
    const repo = this.repos.get(`${parts[1]}/${parts[2]}`.toLowerCase())
    if (!repo || !this.canRead(account, repo)) return send(404, { message: 'Not Found' })
    const rest = parts.slice(3)
    if (rest.length === 0) return send(200, this.repoJson(repo))
    if (rest[0] === 'pulls' && rest.length === 1) {
      const state = url.searchParams.get('state') ?? 'open'
      const pulls = repo.pulls.filter((p) => state === 'all' || p.state === state).sort((a, b) => b.number - a.number)
      return page(pulls.map((p) => this.pullJson(repo, p)))
    }
    if (rest[0] === 'commits' && rest.length >= 2) {
      const sha = this.resolveRef(repo, rest.slice(1).join('/'))
      if (!sha) return send(422, { message: `No commit found for SHA: ${rest.slice(1).join('/')}` })
      if (String(req.headers.accept ?? '').includes('.sha'))
        return send(200, sha, { 'content-type': 'application/vnd.github.sha; charset=utf-8' })
      return send(200, { sha, commit: { message: 'a commit' } })
    }
    if (rest[0] === 'git' && rest[1] === 'trees' && rest.length === 3) {
      const files = repo.commits.get(rest[2]!)
      if (!files) return send(404, { message: 'Not Found' })
      const dirs = new Set<string>()
      for (const path of files.keys()) {
        const segments = path.split('/')
        for (let i = 1; i < segments.length; i++) dirs.add(segments.slice(0, i).join('/'))
      }
      const tree = [
        ...[...dirs].map((path) => ({
          path,
          mode: '040000',
          type: 'tree',
          sha: createHash('sha1').update(`tree:${path}`).digest('hex')
        })),
        ...[...files].map(([path, content]) => ({
          path,
          mode: '100644',
          type: 'blob',
          sha: gitBlobSha(content),
          size: Buffer.byteLength(content)
        }))
      ].sort((a, b) => a.path.localeCompare(b.path))
      return send(200, { sha: rest[2], tree, truncated: false })
    }
    if (rest[0] === 'contents') {
      const ref = url.searchParams.get('ref') ?? repo.defaultBranch
      const sha = this.resolveRef(repo, ref)
      if (!sha) return send(404, { message: `No commit found for the ref ${ref}` })
      const files = repo.commits.get(sha)!
      const path = rest.slice(1).join('/')
      const content = files.get(path)
      if (content !== undefined) {
        const base64 = Buffer.from(content, 'utf8').toString('base64').replace(/.{60}/g, '$&\n')
        return send(200, {
          type: 'file',
          encoding: 'base64',
          size: Buffer.byteLength(content),
          name: path.split('/').pop(),
          path,
          content: base64,
          sha: gitBlobSha(content)
        })
      }
      const inside = [...files.keys()].filter((p) => path === '' || p.startsWith(`${path}/`))
      if (inside.length === 0) return send(404, { message: 'Not Found' })
      const names = [...new Set(inside.map((p) => p.slice(path === '' ? 0 : path.length + 1).split('/')[0]!))]
      return send(
        200,
        names.map((name) => ({
          type: files.has(path === '' ? name : `${path}/${name}`) ? 'file' : 'dir',
          name,
          path: path === '' ? name : `${path}/${name}`
        }))
      )
    }
    return send(404, { message: 'Not Found' })
  }

  private sendLimit(send: (status: number, body: unknown, headers?: Record<string, string>) => void): void {
    const limit = this.limit!
    if (limit.kind === 'primary') {
      const reset = Math.floor(Date.now() / 1000) + limit.resetInSeconds
      return send(
        403,
        {
          message: 'API rate limit exceeded for user ID 1000.',
          documentation_url: 'https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting'
        },
        { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(reset) }
      )
    }
    if (limit.kind === 'secondary') {
      return send(
        403,
        { message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.' },
        limit.retryAfter === undefined ? {} : { 'retry-after': String(limit.retryAfter) }
      )
    }
    return send(429, { message: 'Too many requests' }, { 'retry-after': String(limit.retryAfter) })
  }

  private canRead(account: FakeAccount, repo: FakeRepo): boolean {
    return repo.owner.toLowerCase() === account.login.toLowerCase() || repo.collaborators.has(account.login)
  }

  private fullName(repo: FakeRepo): string {
    return `${repo.owner}/${repo.name}`
  }

  private resolveRef(repo: FakeRepo, ref: string): string | null {
    const branch = repo.branches.get(ref)
    if (branch) return branch
    if (/^[0-9a-f]{7,40}$/.test(ref)) {
      const found = [...repo.commits.keys()].filter((sha) => sha.startsWith(ref))
      if (found.length === 1) return found[0]!
    }
    return null
  }

  private repoJson(repo: FakeRepo) {
    return {
      id: repo.id,
      node_id: `R_${repo.id}`,
      name: repo.name,
      full_name: this.fullName(repo),
      owner: { login: repo.owner, id: 1, type: 'User' },
      private: repo.private,
      html_url: `https://github.example/${this.fullName(repo)}`,
      description: repo.description,
      fork: false,
      default_branch: repo.defaultBranch,
      created_at: '2025-01-01T00:00:00Z',
      updated_at: '2025-06-01T00:00:00Z',
      pushed_at: '2025-06-01T00:00:00Z'
    }
  }

  private pullJson(repo: FakeRepo, p: FakePull) {
    const json: Record<string, unknown> = {
      id: repo.id * 1000 + p.number,
      number: p.number,
      title: p.title,
      state: p.state,
      draft: p.draft,
      user: { login: p.author, id: 1 },
      head: { ref: p.head, sha: '0'.repeat(40) },
      base: { ref: p.base, sha: '0'.repeat(40) },
      html_url: `https://github.example/${this.fullName(repo)}/pull/${p.number}`,
      created_at: `2025-0${Math.min(9, p.number)}-01T00:00:00Z`,
      updated_at: `2025-0${Math.min(9, p.number)}-02T00:00:00Z`,
      closed_at: p.state === 'closed' ? '2025-10-01T00:00:00Z' : null,
      merged_at: p.merged ? '2025-10-01T00:00:00Z' : null
    }
    return Object.fromEntries(
      Object.entries(json).filter(([field]) => !(p.omit as string[] | undefined)?.includes(field))
    )
  }
}

/** A fake GitHub for one test, closed at teardown. */
export async function startFakeGitHub(t: { teardown(fn: () => unknown): void }): Promise<FakeGitHub> {
  const fake = await new FakeGitHub().start()
  t.teardown(() => fake.close())
  return fake
}

let shared: Promise<FakeGitHub> | null = null

/** One fake GitHub for a whole test file (the tenancy walk and the fuzz test); it never holds the process open. */
export function fixtureGitHub(): Promise<FakeGitHub> {
  shared ??= new FakeGitHub().start().then((fake) => fake.unref())
  return shared
}
