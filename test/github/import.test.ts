import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { mintKey, signUpWithOrg, type SignedIn, type TestOrg } from '../helper.js'
import { startFakeGitHub, type FakeRepo } from './fake-github.js'
import { buildGitHubApp } from './group.js'

/**
 * Skill import from GitHub: POST /api/skills/import reads the SKILL.md of a repository folder
 * at a ref resolved to a commit; the same commit again is no new version, a new commit is
 * the next version of the same skill.
 */
const github = await startFakeGitHub(t)
const app = await buildGitHubApp(t, { env: { GITHUB_API_URL: github.url, SECRETS_KEY: newKeyText() } })

type Owner = SignedIn & { org: TestOrg }

async function connected(login: string): Promise<Owner> {
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
const importSkill = (owner: Owner, payload: Record<string, unknown>) =>
  app.inject({ method: 'POST', url: '/api/skills/import', headers: { cookie: owner.cookie }, payload })

const skillMd = (name: string, description: string, body = 'Do the thing, step by step.') =>
  `---\nname: ${name}\ndescription: ${description}\nallowed-tools: shell browser\nmetadata:\n  author: octo\n---\n\n${body}\n`

async function skillRows(orgId: string) {
  return rowsOf<{ id: string; name: string; version: number; source: unknown }>(
    await app.db.execute(sql`select id, name, version, source from skills where org_id = ${orgId} order by id`)
  )
}

t.test(
  'import: 201 with the skill and its source; the same commit again is 200 and no new version; a new commit is the next version',
  async (t) => {
    const owner = await connected('skiller')
    const repo = github.addRepo('skiller', 'skills', {
      files: { 'README.md': '# skills\n', 'skills/pdf/SKILL.md': skillMd('pdf-tools', 'Work with PDF files') }
    })
    const first = repo.branches.get('main')!

    const res = await importSkill(owner, { repo: 'skiller/skills', path: 'skills/pdf' })
    t.equal(res.statusCode, 201, res.body)
    const { skill } = res.json()
    t.match(skill, {
      name: 'pdf-tools',
      description: 'Work with PDF files',
      instructions: 'Do the thing, step by step.',
      allowedTools: ['shell', 'browser'],
      metadata: { author: 'octo' },
      version: 1,
      createdBy: owner.user.id
    })
    t.same(skill.source, { kind: 'github', repo: 'skiller/skills', path: 'skills/pdf', ref: 'main', commit: first })

    // the same commit again: by folder, by the file itself, by the SHA, in another case
    for (const payload of [
      { repo: 'skiller/skills', path: 'skills/pdf' },
      { repo: 'skiller/skills', path: 'skills/pdf/SKILL.md' },
      { repo: 'skiller/skills', path: '/skills/pdf/', ref: first },
      { repo: 'Skiller/Skills', path: 'skills/pdf', ref: 'main' }
    ]) {
      const again = await importSkill(owner, payload)
      t.equal(again.statusCode, 200, `${JSON.stringify(payload)}: ${again.body}`)
      t.equal(again.json().skill.id, skill.id)
      t.equal(again.json().skill.version, 1)
      t.equal(again.json().skill.updatedAt, skill.updatedAt, 'nothing was written')
    }
    t.equal((await skillRows(owner.org.id)).length, 1)

    // a new commit changes the file: the next version of the same skill, with the new commit
    const second = github.commit(repo, {
      'skills/pdf/SKILL.md': skillMd('pdf-tools', 'Work with PDF files, better', 'New instructions.')
    })
    const next = await importSkill(owner, { repo: 'skiller/skills', path: 'skills/pdf' })
    t.equal(next.statusCode, 201, next.body)
    t.equal(next.json().skill.id, skill.id, 'the same skill')
    t.equal(next.json().skill.version, 2)
    t.equal(next.json().skill.description, 'Work with PDF files, better')
    t.equal(next.json().skill.instructions, 'New instructions.')
    t.same(next.json().skill.source, {
      kind: 'github',
      repo: 'skiller/skills',
      path: 'skills/pdf',
      ref: 'main',
      commit: second
    })
    const same = await importSkill(owner, { repo: 'skiller/skills', path: 'skills/pdf' })
    t.equal(same.statusCode, 200)
    t.equal(same.json().skill.version, 2)

    // a new commit may rename the skill: still the same skill
    github.commit(repo, { 'skills/pdf/SKILL.md': skillMd('pdf-kit', 'Renamed') })
    const renamed = await importSkill(owner, { repo: 'skiller/skills', path: 'skills/pdf' })
    t.equal(renamed.statusCode, 201)
    t.equal(renamed.json().skill.id, skill.id)
    t.equal(renamed.json().skill.name, 'pdf-kit')
    t.equal(renamed.json().skill.version, 3)

    // the file back, and a run of it
    const file = await app.inject({
      method: 'GET',
      url: `/api/skills/${skill.id}/skill.md`,
      headers: { cookie: owner.cookie }
    })
    t.match(file.body, /name: pdf-kit/)
    t.same(
      (await skillRows(owner.org.id)).map((s) => [s.name, s.version]),
      [['pdf-kit', 3]]
    )
  }
)

t.test('the root SKILL.md, another branch, and two imports at once settle on one skill', async (t) => {
  const owner = await connected('rooted')
  const repo = github.addRepo('rooted', 'one-skill', { files: { 'SKILL.md': skillMd('root-skill', 'At the root') } })
  const root = await importSkill(owner, { repo: 'rooted/one-skill', path: '' })
  t.equal(root.statusCode, 201, root.body)
  t.equal(root.json().skill.source.path, '')
  t.equal((await importSkill(owner, { repo: 'rooted/one-skill', path: 'SKILL.md' })).statusCode, 200)

  const dev = github.commit(repo, { 'SKILL.md': skillMd('root-skill', 'On the dev branch') }, 'dev')
  const onDev = await importSkill(owner, { repo: 'rooted/one-skill', path: '.', ref: 'dev' })
  t.equal(onDev.statusCode, 201)
  t.same(onDev.json().skill.source, { kind: 'github', repo: 'rooted/one-skill', path: '', ref: 'dev', commit: dev })
  t.equal(onDev.json().skill.version, 2)

  github.addRepo('rooted', 'race', { files: { 'x/SKILL.md': skillMd('raced', 'Imported twice at once') } })
  const both = await Promise.all([0, 1, 2].map(() => importSkill(owner, { repo: 'rooted/race', path: 'x' })))
  t.same(both.map((r) => r.statusCode).sort(), [200, 200, 201], both.map((r) => r.body).join('\n'))
  t.equal(new Set(both.map((r) => r.json().skill.id)).size, 1)
  t.equal((await skillRows(owner.org.id)).filter((s) => s.name === 'raced').length, 1)
})

t.test(
  'refusals: an invalid SKILL.md is 400 with its line; missing things are 404; a name held by another skill is 409; nothing is stored',
  async (t) => {
    const owner = await connected('refused')
    github.addRepo('refused', 'bad', {
      files: {
        'broken/SKILL.md': '---\nname: broken\ndescription: [unclosed\n---\nBody\n',
        'nameless/SKILL.md': '---\ndescription: no name\n---\nBody\n',
        'clash/SKILL.md': skillMd('taken-name', 'Clashes'),
        'docs/readme.md': '# not a skill\n'
      }
    })
    const manual = await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers: { cookie: owner.cookie },
      payload: { name: 'taken-name', description: 'made by hand', instructions: 'Mine.' }
    })
    t.equal(manual.statusCode, 201)
    const before = JSON.stringify(await skillRows(owner.org.id))

    const broken = await importSkill(owner, { repo: 'refused/bad', path: 'broken' })
    t.equal(broken.statusCode, 400)
    t.equal(broken.json().error, 'validation_failed')
    t.equal(broken.json().details[0].path, '/body/path')
    t.ok(broken.json().details[0].line >= 3, 'the line in the file (counted from its first line)')
    t.type(broken.json().details[0].column, 'number')
    t.match(broken.json().details[0].message, /SKILL\.md/)
    const nameless = await importSkill(owner, { repo: 'refused/bad', path: 'nameless' })
    t.equal(nameless.statusCode, 400)
    t.match(
      nameless
        .json()
        .details.map((d: { message: string }) => d.message)
        .join(' '),
      /name is required/
    )

    const clash = await importSkill(owner, { repo: 'refused/bad', path: 'clash' })
    t.equal(clash.statusCode, 409)
    t.equal(clash.json().error, 'conflict')
    t.match(clash.json().message, /taken-name/)

    for (const payload of [
      { repo: 'refused/bad', path: 'nowhere' },
      { repo: 'refused/bad', path: 'docs' },
      { repo: 'refused/bad', path: 'docs/readme.md' },
      { repo: 'refused/missing-repo', path: 'x' },
      { repo: 'someone/private-stuff', path: 'x' },
      { repo: 'refused/bad', path: 'clash', ref: 'no-such-branch' },
      { repo: 'refused/bad', path: 'clash', ref: 'deadbeefdeadbeef' }
    ]) {
      const res = await importSkill(owner, payload)
      t.equal(res.statusCode, 404, `${JSON.stringify(payload)}: ${res.body}`)
      t.equal(res.json().error, 'not_found')
    }

    const asked = github.log.length
    for (const payload of [
      { repo: 'refused/bad', path: '../etc' },
      { repo: 'refused/bad', path: 'a/../b' },
      { repo: 'refused/bad', path: 'a\\b' },
      { repo: 'refused/bad', path: 'a\tb' },
      { repo: 'refused/bad', path: 'x', ref: 'main..dev' },
      { repo: 'refused/bad', path: 'x', ref: 'has space' },
      { repo: 'refused/bad', path: 'x', ref: '' },
      { repo: 'not-a-repo', path: 'x' },
      { repo: 'a/b/c', path: 'x' },
      { repo: 'refused/..', path: 'x' },
      { repo: 'refused/bad' },
      { repo: 'refused/bad', path: 'x', extra: true },
      { repo: 'refused/bad', path: 'x'.repeat(1025) }
    ]) {
      const res = await importSkill(owner, payload)
      t.equal(res.statusCode, 400, `${JSON.stringify(payload).slice(0, 80)}: ${res.body}`)
      t.equal(res.json().error, 'validation_failed')
    }
    t.equal(github.log.length, asked, 'schema and path refusals never ask GitHub')
    t.equal(JSON.stringify(await skillRows(owner.org.id)), before, 'nothing was stored or changed')

    // GitHub's rate limit: 503 with Retry-After, nothing stored
    github.limit = { kind: '429', retryAfter: 12 }
    const limited = await importSkill(owner, { repo: 'refused/bad', path: 'clash' })
    github.limit = null
    t.equal(limited.statusCode, 503)
    t.equal(limited.json().error, 'upstream_rate_limited')
    t.equal(limited.headers['retry-after'], '12')
    t.equal(JSON.stringify(await skillRows(owner.org.id)), before)
  }
)

t.test('tenancy: each org imports with its own token; an API key may not import', async (t) => {
  const a = await connected('tenant-one')
  const b = await connected('tenant-two')
  const repo: FakeRepo = github.addRepo('tenant-one', 'kit', {
    files: { 's/SKILL.md': skillMd('kit-skill', 'Tenant one') }
  })
  t.ok(repo)
  t.equal((await importSkill(a, { repo: 'tenant-one/kit', path: 's' })).statusCode, 201)
  const other = await importSkill(b, { repo: 'tenant-one/kit', path: 's' })
  t.equal(other.statusCode, 404, "org B's token cannot read the repository")
  t.same(await skillRows(b.org.id), [])
  // shared with B's account: B gets its own skill, A's stays as it is
  repo.collaborators.add('tenant-two')
  const shared = await importSkill(b, { repo: 'tenant-one/kit', path: 's' })
  t.equal(shared.statusCode, 201)
  t.equal((await skillRows(a.org.id)).length, 1)
  t.equal((await skillRows(b.org.id)).length, 1)
  t.not((await skillRows(a.org.id))[0]!.id, (await skillRows(b.org.id))[0]!.id)

  const { authorization } = await mintKey(app, a.cookie)
  const byKey = await app.inject({
    method: 'POST',
    url: '/api/skills/import',
    headers: { authorization },
    payload: { repo: 'tenant-one/kit', path: 's' }
  })
  t.equal(byKey.statusCode, 401)
})
