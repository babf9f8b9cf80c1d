import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, mintKey, signUpWithOrg, type SignedIn, type TestOrg } from '../helper.js'
import { startOpenAiUpstream } from '../runs/openai-upstream.js'
import { finishedRun, storedEventsOf } from '../runs/run-helpers.js'
import { startFakeGitHub, type FakeGitHub } from './fake-github.js'

/**
 * The repository wiki: POST /api/knowledge/wiki is a run that reads the repository at a
 * commit and writes one knowledge record per page; at the same commit nothing changes,
 * after a change only the pages citing changed files get a new version.
 */
type App = Awaited<ReturnType<typeof buildTestApp>>
type Owner = SignedIn & { org: TestOrg }

interface Rec {
  id: string
  title: string
  body: string
  tags: string[]
  version: number
  updatedAt: string
  source: { kind: string; repo: string; commit: string; path: string; citedFiles: string[] }
}

const FILES = {
  'README.md': '# Tools\n\nA toolbox.\n\n## Install\n\nnpm i\n\n## Usage\n\n```sh\n# not a heading\n```\n',
  'package.json': JSON.stringify({ name: 'tools', version: '1.0.0', scripts: { test: 'tap' } }, null, 2),
  'docs/guide.md': '# Guide\n\n## Start\n\nBegin here.\n\n### Details\n',
  'docs/api.md': '# API\n\nThe endpoints.\n',
  'docs/logo.png': 'not really a png',
  'src/index.ts':
    "import { add } from './util.js'\n\nexport function main() {\n  return add(1, 2)\n}\n\nexport class App {\n}\n",
  'src/util.ts': 'export const add = (a: number, b: number) => a + b\n',
  'src/deep/inner.ts': 'export const inner = 1\n',
  '.github/workflows/ci.yml': 'on: push\n'
}

async function connected(app: App, github: FakeGitHub, login: string): Promise<Owner> {
  const owner = await signUpWithOrg(app)
  const account = github.addAccount(login)
  const res = await app.inject({
    method: 'PUT',
    url: '/api/integrations/github',
    headers: { cookie: owner.cookie },
    payload: { token: account.token }
  })
  if (res.statusCode !== 200) throw new Error(`connect: ${res.statusCode} ${res.body}`)
  return owner
}

async function build(app: App, owner: Owner, payload: Record<string, unknown>) {
  const res = await app.inject({
    method: 'POST',
    url: '/api/knowledge/wiki',
    headers: { cookie: owner.cookie },
    payload
  })
  if (res.statusCode !== 202) throw new Error(`wiki: ${res.statusCode} ${res.body}`)
  const run = res.json().run
  return { accepted: run, done: await finishedRun(app, owner.cookie, run.id) }
}

async function pages(app: App, owner: Owner, repo: string): Promise<Map<string, Rec>> {
  const res = await app.inject({
    method: 'GET',
    url: `/api/knowledge?tag=${encodeURIComponent(`wiki:${repo}`)}&limit=200`,
    headers: { cookie: owner.cookie }
  })
  return new Map((res.json().items as Rec[]).map((r) => [r.source.path, r]))
}

const historyCount = async (app: App, orgId: string) =>
  rowsOf<{ n: number }>(
    await app.db.execute(sql`select count(*)::int as n from knowledge_record_history where org_id = ${orgId}`)
  )[0]!.n

t.test(
  'echo: one record per page, deterministic outlines; the same commit again changes nothing; a change rewrites only the pages citing it',
  async (t) => {
    const github = await startFakeGitHub(t)
    const app = await buildTestApp(t, {
      env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText(), RUN_POLL_MS: '50' }
    })
    const owner = await connected(app, github, 'wikier')
    const repo = github.addRepo('wikier', 'tools', { files: FILES })
    const first = repo.branches.get('main')!

    const res = await app.inject({
      method: 'POST',
      url: '/api/knowledge/wiki',
      headers: { cookie: owner.cookie },
      payload: { repo: 'wikier/tools' }
    })
    t.equal(res.statusCode, 202, res.body)
    const run = res.json().run
    t.match(run, {
      engine: 'echo',
      origin: 'web',
      userId: owner.user.id,
      metadata: { wiki: { repo: 'wikier/tools', ref: 'main', commit: first } }
    })
    t.ok(['queued', 'running', 'succeeded'].includes(run.status))
    const done = await finishedRun(app, owner.cookie, run.id)
    t.equal(done.status, 'succeeded', done.error ?? '')

    const built = await pages(app, owner, 'wikier/tools')
    t.same([...built.keys()].sort(), ['README.md', 'docs/api.md', 'docs/guide.md', 'src/'])
    const readme = built.get('README.md')!
    t.same(readme.source, {
      kind: 'wiki',
      repo: 'wikier/tools',
      commit: first,
      path: 'README.md',
      citedFiles: ['README.md', 'package.json']
    })
    t.same(readme.tags, ['wiki:wikier/tools'])
    t.equal(readme.title, 'wikier/tools: overview')
    t.equal(readme.version, 1)
    t.match(readme.body, /^# wikier\/tools: overview\n/)
    t.match(readme.body, /## README\.md\n\n\d+ lines, \d+ bytes\. Sections:\n\n- Tools\n {2}- Install\n {2}- Usage/)
    t.notMatch(readme.body, /not a heading/, 'headings inside code fences are not headings')
    t.match(readme.body, /## package\.json[\s\S]*- `name`\n- `version`\n- `scripts`/)
    t.match(built.get('docs/guide.md')!.body, /- Guide\n {2}- Start\n {4}- Details/)
    t.same(built.get('docs/guide.md')!.source.citedFiles, ['docs/guide.md'])
    const src = built.get('src/')!
    t.same(
      src.source.citedFiles,
      ['src/index.ts', 'src/util.ts'],
      'top-level sources of the folder (not deeper, not hidden)'
    )
    t.match(src.body, /export function main\(\)/)
    t.match(src.body, /export class App/)
    t.match(src.body, /export const add = /)
    t.notMatch(JSON.stringify([...built.values()]), /ci\.yml|logo\.png|inner\.ts/)

    const events = await storedEventsOf(app, owner.org.id, run.id)
    const completed = events.find((e) => e.type === 'message.completed')!
    t.match(
      completed.data.text,
      /^Wiki of wikier\/tools at [0-9a-f]{12}: 4 pages; 4 created, 0 updated, 0 unchanged, 0 removed\./
    )

    // deterministic: another org building the same commit gets the same page texts
    const other = await connected(app, github, 'reader')
    repo.collaborators.add('reader')
    t.equal((await build(app, other, { repo: 'wikier/tools' })).done.status, 'succeeded')
    const theirs = await pages(app, other, 'wikier/tools')
    t.same(
      [...theirs.values()].map((r) => [r.source.path, r.body]).sort(),
      [...built.values()].map((r) => [r.source.path, r.body]).sort()
    )
    t.notOk(
      [...theirs.values()].some((r) => built.has(r.source.path) && built.get(r.source.path)!.id === r.id),
      'their own records'
    )

    // the same commit again: no new versions, no file read
    const historyBefore = await historyCount(app, owner.org.id)
    const contentsBefore = github.log.filter((l) => l.path.includes('/contents/')).length
    const again = await build(app, owner, { repo: 'wikier/tools', ref: first })
    t.equal(again.done.status, 'succeeded')
    t.same(await pages(app, owner, 'wikier/tools'), built, 'every page as it was')
    t.equal(await historyCount(app, owner.org.id), historyBefore, 'no history entry')
    t.equal(github.log.filter((l) => l.path.includes('/contents/')).length, contentsBefore, 'no file was read')
    const againText = (await storedEventsOf(app, owner.org.id, again.accepted.id)).find(
      (e) => e.type === 'message.completed'
    )!.data.text
    t.match(againText, /0 created, 0 updated, 4 unchanged, 0 removed/)

    // a change: guide edited, api removed, a new document; the overview and src/ do not cite any of them
    const second = github.commit(repo, {
      'docs/guide.md': '# Guide\n\n## Start again\n',
      'docs/api.md': null,
      'docs/new.md': '# New page\n'
    })
    const changed = await build(app, owner, { repo: 'wikier/tools' })
    t.equal(changed.done.status, 'succeeded')
    const after = await pages(app, owner, 'wikier/tools')
    t.same([...after.keys()].sort(), ['README.md', 'docs/guide.md', 'docs/new.md', 'src/'])
    t.equal(after.get('docs/guide.md')!.id, built.get('docs/guide.md')!.id, 'the same record')
    t.equal(after.get('docs/guide.md')!.version, 2)
    t.equal(after.get('docs/guide.md')!.source.commit, second)
    t.match(after.get('docs/guide.md')!.body, /- Start again/)
    t.equal(after.get('docs/new.md')!.version, 1)
    t.same(after.get('README.md'), built.get('README.md'), 'the overview is unchanged (version, commit, text)')
    t.same(after.get('src/'), built.get('src/'), 'src/ is unchanged')
    const gone = await app.inject({
      method: 'GET',
      url: `/api/knowledge/${built.get('docs/api.md')!.id}`,
      headers: { cookie: owner.cookie }
    })
    t.equal(gone.statusCode, 404, 'the page of a removed file is deleted')
    const goneHistory = await app.inject({
      method: 'GET',
      url: `/api/knowledge/${built.get('docs/api.md')!.id}/history`,
      headers: { cookie: owner.cookie }
    })
    t.same(
      goneHistory.json().history.map((h: { kind: string }) => h.kind),
      ['created', 'deleted']
    )
    t.match(
      (await storedEventsOf(app, owner.org.id, changed.accepted.id)).find((e) => e.type === 'message.completed')!.data
        .text,
      /1 created, 1 updated, 2 unchanged, 1 removed/
    )

    // a file the overview cites changes: only the overview moves on
    github.commit(repo, { 'package.json': JSON.stringify({ name: 'tools', version: '2.0.0' }) })
    t.equal((await build(app, owner, { repo: 'wikier/tools' })).done.status, 'succeeded')
    const third = await pages(app, owner, 'wikier/tools')
    t.equal(third.get('README.md')!.version, 2)
    t.equal(third.get('docs/guide.md')!.version, 2)
    t.equal(third.get('docs/new.md')!.version, 1)
    t.equal(third.get('src/')!.version, 1)

    // a page a person deleted is written again; one a person edited stays until its files change
    await app.inject({
      method: 'DELETE',
      url: `/api/knowledge/${third.get('docs/new.md')!.id}`,
      headers: { cookie: owner.cookie }
    })
    const edited = await app.inject({
      method: 'PATCH',
      url: `/api/knowledge/${third.get('src/')!.id}`,
      headers: { cookie: owner.cookie },
      payload: { body: 'My notes.', version: 1 }
    })
    t.equal(edited.statusCode, 200)
    t.equal((await build(app, owner, { repo: 'wikier/tools' })).done.status, 'succeeded')
    const fourth = await pages(app, owner, 'wikier/tools')
    t.equal(fourth.get('docs/new.md')!.version, 1)
    t.not(fourth.get('docs/new.md')!.id, third.get('docs/new.md')!.id, 'a new record')
    t.equal(fourth.get('src/')!.body, 'My notes.')
    t.equal(fourth.get('src/')!.version, 2)

    // a plain run that claims to be a wiki run in its metadata builds nothing
    const spoof = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'hello', metadata: { wiki: { repo: 'wikier/tools', commit: second } } }
    })
    const spoofed = await finishedRun(app, owner.cookie, spoof.json().run.id)
    t.equal(spoofed.status, 'succeeded')
    t.equal(
      (await storedEventsOf(app, owner.org.id, spoofed.id)).find((e) => e.type === 'message.completed')!.data.text,
      'hello',
      'the engine answered the prompt'
    )
  }
)

t.test(
  'refs, refusals and failures: 404s and 400s start no run; a rate limit or a revoked token during the run fails it with the sentence',
  async (t) => {
    const github = await startFakeGitHub(t)
    const app = await buildTestApp(t, {
      env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText(), RUN_POLL_MS: '50' }
    })
    const owner = await connected(app, github, 'refs')
    const repo = github.addRepo('refs', 'lib', { files: { 'README.md': '# Lib\n' } })
    const dev = github.commit(repo, { 'README.md': '# Lib (dev)\n' }, 'dev')
    const runCount = async () =>
      rowsOf<{ n: number }>(
        await app.db.execute(sql`select count(*)::int as n from runs where org_id = ${owner.org.id}`)
      )[0]!.n

    const onDev = await build(app, owner, { repo: 'refs/lib', ref: 'dev' })
    t.equal(onDev.done.status, 'succeeded')
    t.same(onDev.accepted.metadata.wiki, { repo: 'refs/lib', ref: 'dev', commit: dev })
    t.match((await pages(app, owner, 'refs/lib')).get('README.md')!.body, /- Lib \(dev\)/)

    const runs = await runCount()
    for (const payload of [{ repo: 'refs/nope' }, { repo: 'refs/lib', ref: 'no-branch' }, { repo: 'stranger/lib' }]) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge/wiki',
        headers: { cookie: owner.cookie },
        payload
      })
      t.equal(res.statusCode, 404, JSON.stringify(payload))
      t.equal(res.json().error, 'not_found')
    }
    const asked = github.log.length
    for (const payload of [
      { repo: 'refs' },
      { repo: 'refs/lib', ref: 'a..b' },
      { repo: 'refs/lib', extra: 1 },
      {},
      { repo: 'refs/lib', engine: 'Bad Engine' }
    ]) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/knowledge/wiki',
        headers: { cookie: owner.cookie },
        payload
      })
      t.equal(res.statusCode, 400, JSON.stringify(payload))
      t.equal(res.json().error, 'validation_failed')
    }
    t.equal(github.log.length, asked, 'GitHub was not asked')
    const noEngine = await app.inject({
      method: 'POST',
      url: '/api/knowledge/wiki',
      headers: { cookie: owner.cookie },
      payload: { repo: 'refs/lib', engine: 'missing' }
    })
    t.equal(noEngine.statusCode, 400)
    t.equal(noEngine.json().error, 'engine_unavailable')
    github.limit = { kind: 'secondary', retryAfter: 33 }
    const limited = await app.inject({
      method: 'POST',
      url: '/api/knowledge/wiki',
      headers: { cookie: owner.cookie },
      payload: { repo: 'refs/lib' }
    })
    github.limit = null
    t.equal(limited.statusCode, 503)
    t.equal(limited.headers['retry-after'], '33')
    t.equal(await runCount(), runs, 'no run was started')
    const { authorization } = await mintKey(app, owner.cookie)
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: '/api/knowledge/wiki',
          headers: { authorization },
          payload: { repo: 'refs/lib' }
        })
      ).statusCode,
      401
    )

    // GitHub's rate limit while the run reads the tree: the run fails saying when to try again
    github.commit(repo, { 'docs/a.md': '# A\n' })
    github.failNext(/\/git\/trees\//, 429, { message: 'Too many requests' }, { 'retry-after': '30' })
    const cut = await build(app, owner, { repo: 'refs/lib' })
    t.equal(cut.done.status, 'failed')
    t.match(cut.done.error, /GitHub's rate limit is used up; try again in 30 s/)
    // the token refused while the run reads (GitHub says 401, and 401 again to the re-verification):
    // failed with the reconnect sentence, and lastError set
    github.failNext(/\/git\/trees\//, 401, { message: 'Bad credentials' })
    github.failNext(/^\/user$/, 401, { message: 'Bad credentials' })
    const refused = await build(app, owner, { repo: 'refs/lib' })
    t.equal(refused.done.status, 'failed')
    t.match(refused.done.error, /revoked or has expired/)
    const integration = (
      await app.inject({ method: 'GET', url: '/api/integrations', headers: { cookie: owner.cookie } })
    )
      .json()
      .items.find((i: { kind: string }) => i.kind === 'github')
    t.match(integration.lastError, /revoked/)
  }
)

t.test(
  "with a model: the run's model writes each page from the files; the same commit again asks it nothing",
  async (t) => {
    const github = await startFakeGitHub(t)
    const asked: Array<{ messages: Array<{ role: string; content: string }>; model: string }> = []
    const upstream = await startOpenAiUpstream(t, {
      models: ['wiki-model'],
      chat(body, stream) {
        asked.push(body)
        const user = (body.messages as Array<{ role: string; content: string }>).find((m) => m.role === 'user')!.content
        const title = /Page title: (.*)\./.exec(user)![1]!
        const chat = stream()
        chat.delta({ content: `# ${title}\n\nWritten by the model ` })
        chat.delta({ content: `from ${(user.match(/^### /gm) ?? []).length} files.` })
        chat.end({ prompt_tokens: 100, completion_tokens: 10 })
      }
    })
    const app = await buildTestApp(t, {
      env: {
        GITHUB_API_URL: github.url,
        SECRETS_KEY: newKeyText(),
        RUN_POLL_MS: '50',
        OPENAI_BASE_URL: upstream,
        OPENAI_API_KEY: 'sk-test',
        MODELS: 'wiki-model'
      }
    })
    const owner = await connected(app, github, 'modeler')
    github.addRepo('modeler', 'svc', {
      files: { 'README.md': '# Svc\n', 'src/main.py': 'def main():\n    pass\n', 'src/db.py': 'class Db:\n    pass\n' }
    })

    const { accepted, done } = await build(app, owner, { repo: 'modeler/svc' })
    t.match(accepted, { engine: 'openai', model: 'wiki-model' }, 'the first ready model by default')
    t.equal(done.status, 'succeeded', done.error ?? '')
    t.equal(asked.length, 2, 'one request per page')
    t.equal(asked[0]!.model, 'wiki-model')
    t.match(asked[0]!.messages[0]!.content, /internal wiki/)
    const srcPrompt = asked.map((a) => a.messages[1]!.content).find((c) => c.includes('src/'))!
    t.match(srcPrompt, /### src\/db\.py\n\n```\nclass Db:/)
    const built = await pages(app, owner, 'modeler/svc')
    t.match(
      built.get('src/')!.body,
      /^# modeler\/svc: src\/\n\nWritten by the model from 2 files\.\n\n---\n\nWritten from `modeler\/svc` at commit `[0-9a-f]{12}`: `src\/db\.py`, `src\/main\.py`\.\n$/
    )
    t.same(built.get('src/')!.source.citedFiles, ['src/db.py', 'src/main.py'])
    const succeeded = (await storedEventsOf(app, owner.org.id, done.id)).find((e) => e.type === 'run.succeeded')!
    t.same(succeeded.data.usage, { promptTokens: 200, completionTokens: 20 })

    const again = await build(app, owner, { repo: 'modeler/svc' })
    t.equal(again.done.status, 'succeeded')
    t.equal(asked.length, 2, 'nothing changed: the model was not asked')
    t.same(await pages(app, owner, 'modeler/svc'), built)

    // an explicit engine wins
    const offline = await app.inject({
      method: 'POST',
      url: '/api/knowledge/wiki',
      headers: { cookie: owner.cookie },
      payload: { repo: 'modeler/svc', engine: 'echo' }
    })
    t.equal(offline.json().run.engine, 'echo')
    await finishedRun(app, owner.cookie, offline.json().run.id)
  }
)
