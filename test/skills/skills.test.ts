import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { parseSkillMd } from '../../src/skills/skill-md.js'
import { mintKey, signUpWithOrg, waitFor } from '../helper.js'
import { buildSkillsApp } from './group.js'

type App = Awaited<ReturnType<typeof buildSkillsApp>>

const SKILL_KEYS = [
  'allowedTools',
  'compatibility',
  'createdAt',
  'createdBy',
  'description',
  'id',
  'instructions',
  'license',
  'metadata',
  'name',
  'source',
  'updatedAt',
  'version',
  'warnings'
]
const PROPOSAL_KEYS = [
  'baseVersion',
  'createdAt',
  'createdBy',
  'decidedAt',
  'decidedBy',
  'id',
  'runId',
  'skillId',
  'skillMd',
  'state'
]

const FILE = `---
name: release-notes
description: "Write release notes: from merged pull requests, grouped by area."
license: Apache-2.0
compatibility: Needs git
allowed-tools: Bash(git:*) Read
metadata:
  author: platform
  version: "1.0"
---

# Release notes

List the merged pull requests since the last tag, then group them.
`

const count = async (app: App, table: string) =>
  rowsOf<{ n: number }>(await app.db.execute(sql`select count(*)::int as n from ${sql.identifier(table)}`))[0]!.n

t.test(
  'skills: created from a SKILL.md or from fields, read back as the same file, updated by version, deleted',
  async (t) => {
    const app = await buildSkillsApp(t)
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }

    const created = await app.inject({ method: 'POST', url: '/api/skills', headers, payload: { skillMd: FILE } })
    t.equal(created.statusCode, 201)
    const skill = created.json().skill
    t.same(Object.keys(skill).sort(), SKILL_KEYS)
    t.match(skill, {
      name: 'release-notes',
      description: 'Write release notes: from merged pull requests, grouped by area.',
      license: 'Apache-2.0',
      compatibility: 'Needs git',
      allowedTools: ['Bash(git:*)', 'Read'],
      metadata: { author: 'platform', version: '1.0' },
      version: 1,
      source: { kind: 'manual' },
      createdBy: owner.user.id,
      instructions: '# Release notes\n\nList the merged pull requests since the last tag, then group them.'
    })

    // the round trip: the file served parses into the same skill
    const file = await app.inject({ method: 'GET', url: `/api/skills/${skill.id}/skill.md`, headers })
    t.equal(file.statusCode, 200)
    t.match(file.headers['content-type'], /^text\/markdown/)
    const reparsed = parseSkillMd(file.body)
    t.ok(reparsed.ok)
    if (reparsed.ok) {
      const { name, description, instructions, license, compatibility, allowedTools, metadata } = skill
      t.same(reparsed.skill, { name, description, instructions, license, compatibility, allowedTools, metadata })
    }

    // the same name again: 409, nothing stored
    const twice = await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'release-notes', description: 'again' }
    })
    t.equal(twice.statusCode, 409)
    t.equal(twice.json().error, 'conflict')
    t.equal(await count(app, 'skills'), 1)

    const fields = await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'triage', description: 'Triage an issue', instructions: 'Label it.\r\nAssign it.' }
    })
    t.equal(fields.statusCode, 201)
    t.match(fields.json().skill, {
      name: 'triage',
      instructions: 'Label it.\nAssign it.',
      license: null,
      compatibility: null,
      allowedTools: [],
      metadata: {}
    })

    // update by version: one winner, the stale one is 409
    const patch = (payload: Record<string, unknown>) =>
      app.inject({ method: 'PATCH', url: `/api/skills/${skill.id}`, headers, payload })
    const [a, b] = await Promise.all([
      patch({ description: 'first', version: 1 }),
      patch({ description: 'second', version: 1 })
    ])
    t.same([a.statusCode, b.statusCode].sort(), [200, 409])
    const winner = (a.statusCode === 200 ? a : b).json().skill
    t.equal(winner.version, 2)
    t.equal(winner.license, 'Apache-2.0', 'fields not sent are kept')
    const whole = await patch({ skillMd: FILE.replace('Apache-2.0', 'MIT'), version: 2 })
    t.equal(whole.statusCode, 200)
    t.match(whole.json().skill, {
      license: 'MIT',
      version: 3,
      description: 'Write release notes: from merged pull requests, grouped by area.'
    })
    const both = await patch({ skillMd: FILE, description: 'x', version: 3 })
    t.equal(both.statusCode, 400)
    t.equal(both.json().details[0].path, '/body/description')
    const renamed = await patch({ name: 'triage', version: 3 })
    t.equal(renamed.statusCode, 409, "another skill's name")

    // lists and reads with a key; writes are not for keys
    const { authorization } = await mintKey(app, owner.cookie)
    const listed = await app.inject({ method: 'GET', url: '/api/skills', headers: { authorization } })
    t.equal(listed.statusCode, 200)
    t.same(
      listed.json().items.map((s: { name: string }) => s.name),
      ['triage', 'release-notes']
    )
    t.equal(
      (await app.inject({ method: 'GET', url: `/api/skills/${skill.id}/skill.md`, headers: { authorization } }))
        .statusCode,
      200
    )
    t.equal(
      (await app.inject({ method: 'DELETE', url: `/api/skills/${skill.id}`, headers: { authorization } })).statusCode,
      401
    )

    t.equal((await app.inject({ method: 'DELETE', url: `/api/skills/${skill.id}`, headers })).statusCode, 204)
    t.equal((await app.inject({ method: 'GET', url: `/api/skills/${skill.id}`, headers })).statusCode, 404)
    t.equal((await app.inject({ method: 'DELETE', url: `/api/skills/${skill.id}`, headers })).statusCode, 404)
  }
)

t.test(
  'a version or baseVersion past the 32-bit range is 400 validation_failed naming it, and changes nothing',
  async (t) => {
    const app = await buildSkillsApp(t)
    const created = await app.inject({ method: 'POST', url: '/api/skills', payload: { skillMd: FILE } })
    t.equal(created.statusCode, 201)
    const skill = created.json().skill
    const json = { 'content-type': 'application/json' }
    // 1e400 is read as Infinity; the others are numbers JSON carries but the column cannot
    for (const big of ['2147483648', '9007199254740993', '1e400']) {
      const patch = await app.inject({
        method: 'PATCH',
        url: `/api/skills/${skill.id}`,
        headers: json,
        payload: `{"description":"changed","version":${big}}`
      })
      t.equal(patch.statusCode, 400, `PATCH version ${big}`)
      t.equal(patch.json().error, 'validation_failed')
      t.same(
        patch.json().details.map((d: { path: string }) => d.path),
        ['/body/version']
      )
      const propose = await app.inject({
        method: 'POST',
        url: '/api/skills/proposals',
        headers: json,
        payload: `{"skillMd":${JSON.stringify(FILE.replace('Apache-2.0', 'MIT'))},"skillId":"${skill.id}","baseVersion":${big}}`
      })
      t.equal(propose.statusCode, 400, `proposal baseVersion ${big}`)
      t.equal(propose.json().error, 'validation_failed')
      t.same(
        propose.json().details.map((d: { path: string }) => d.path),
        ['/body/baseVersion']
      )
    }
    const after = (await app.inject({ method: 'GET', url: `/api/skills/${skill.id}` })).json().skill
    t.same(after, skill, 'the skill is as it was')
    t.equal(await count(app, 'skill_proposals'), 0)
    // the largest one is a version like any other: stale here
    const stale = await app.inject({
      method: 'PATCH',
      url: `/api/skills/${skill.id}`,
      payload: { description: 'changed', version: 2_147_483_647 }
    })
    t.equal(stale.statusCode, 409)
    t.equal(stale.json().error, 'conflict')
  }
)

t.test('a SKILL.md with problems is a 400 naming each one with its line and column; nothing is stored', async (t) => {
  const app = await buildSkillsApp(t)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  const post = (skillMd: string) => app.inject({ method: 'POST', url: '/api/skills', headers, payload: { skillMd } })

  const colon = await post('---\nname: notes\ndescription: Use when: you need notes\n---\nBody')
  t.equal(colon.statusCode, 400)
  t.equal(colon.json().error, 'validation_failed')
  t.match(colon.json().details, [{ path: '/body/skillMd', line: 3, column: 14, message: /quote the value/ }])

  const js = await post('---js\nmodule.exports = { name: (globalThis.pwned = true, "x") }\n---\n')
  t.equal(js.statusCode, 400)
  t.match(js.json().details, [{ line: 1, column: 4, message: /not accepted/ }])
  t.equal((globalThis as { pwned?: boolean }).pwned, undefined, 'nothing executed')

  const many = await post(`---\nname: Bad--Name\ndescription: ${'d'.repeat(1025)}\ncolour: blue\n---\n`)
  t.equal(many.statusCode, 400)
  const paths = many.json().details.map((d: { path: string; line: number }) => `${d.path}@${d.line}`)
  t.ok(
    paths.includes('/body/skillMd/name@2') &&
      paths.includes('/body/skillMd/description@3') &&
      paths.includes('/body/skillMd/colour@4'),
    paths.join(' ')
  )

  const crlf = await post('\uFEFF---\r\nname: crlf-skill\r\ndescription: fine\r\n---\r\n\r\nStep one.\r\n')
  t.equal(crlf.statusCode, 201, 'a BOM and CRLF line ends are a normal file')
  t.equal(crlf.json().skill.instructions, 'Step one.')

  const fieldProblems = await app.inject({
    method: 'POST',
    url: '/api/skills',
    headers,
    payload: { name: 'x'.repeat(65), description: '' }
  })
  t.equal(fieldProblems.statusCode, 400)
  t.same(
    fieldProblems.json().details.map((d: { path: string }) => d.path),
    ['/body/name', '/body/description']
  )
  t.equal(await count(app, 'skills'), 1)
})

t.test('a skill run: its prompt, origin and metadata; an Idempotency-Key makes one run', async (t) => {
  const app = await buildSkillsApp(t)
  const owner = await signUpWithOrg(app)
  const { authorization } = await mintKey(app, owner.cookie)
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers: { cookie: owner.cookie },
      payload: { name: 'greet', description: 'Greets', instructions: 'Say hello.' }
    })
  ).json().skill
  const run = (key: string, payload: Record<string, unknown> = { input: 'to Ada' }) =>
    app.inject({
      method: 'POST',
      url: `/api/skills/${skill.id}/run`,
      headers: { authorization, 'idempotency-key': key },
      payload
    })
  const first = await run('k1')
  t.equal(first.statusCode, 201)
  const r = first.json().run
  // the skill's instructions are the system message, the input the prompt
  t.match(r, {
    prompt: 'to Ada',
    instructions: 'Say hello.',
    origin: 'skill',
    metadata: { skillId: skill.id, skillVersion: 1 },
    status: 'queued',
    userId: null
  })
  t.same(r.settings.tools, null, 'no allowed-tools: every tool')
  const again = await run('k1')
  t.equal(again.statusCode, 201)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.json().run.id, r.id)
  const other = await run('k1', { input: 'to Grace' })
  t.equal(other.statusCode, 409, 'the key with another body')
  t.equal(await count(app, 'runs'), 1)

  const bare = await app.inject({ method: 'POST', url: `/api/skills/${skill.id}/run`, headers: { authorization } })
  t.equal(bare.statusCode, 201, 'no body at all')
  t.match(
    bare.json().run,
    { prompt: 'Run the skill greet.', instructions: 'Say hello.' },
    'without an input, a request to run it'
  )
  const inThread = await app.inject({
    method: 'POST',
    url: `/api/skills/${skill.id}/run`,
    headers: { authorization },
    payload: { rootRunId: r.id }
  })
  t.match(inThread.json().run, { rootRunId: r.id, origin: 'skill' })
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: '/api/skills/0190b8f0-0000-7000-8000-000000000000/run',
        headers: { authorization }
      })
    ).statusCode,
    404
  )
  const refused = await app.inject({
    method: 'POST',
    url: `/api/skills/${skill.id}/run`,
    headers: { authorization },
    payload: { input: 'x', responseFormat: { type: 'json_schema', name: 's', schema: { $ref: '#' } } }
  })
  t.equal(refused.statusCode, 400, 'a response format the output check could not run')
  t.match(refused.json(), { error: 'validation_failed', message: /recursive schemas are not accepted/ })
  await waitFor(
    'the skill run succeeds',
    async () =>
      (await app.inject({ method: 'GET', url: `/api/runs/${r.id}`, headers: { authorization } })).json().run.status ===
      'succeeded'
  )
})

t.test(
  "a skill run never uses a stale skill: another instance's edit is seen at once, a deleted skill is 404",
  async (t) => {
    const app = await buildSkillsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
    const second = await buildSkillsApp(t, { db: app.testDb, env: { RUN_WORKER_CONCURRENCY: '0' } })
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    const skill = (
      await app.inject({
        method: 'POST',
        url: '/api/skills',
        headers,
        payload: { name: 'cached', description: 'd', instructions: 'Version one.' }
      })
    ).json().skill
    const run = async (key?: string) =>
      app.inject({
        method: 'POST',
        url: `/api/skills/${skill.id}/run`,
        headers: { ...headers, ...(key ? { 'idempotency-key': key } : {}) },
        payload: { input: 'x' }
      })
    t.equal((await run()).json().run.instructions, 'Version one.', 'cached now')
    t.equal(
      (
        await second.inject({
          method: 'PATCH',
          url: `/api/skills/${skill.id}`,
          headers,
          payload: { instructions: 'Version two.', version: 1 }
        })
      ).statusCode,
      200
    )
    const after = await run('after-edit')
    t.equal(after.statusCode, 201)
    t.match(after.json().run, { prompt: 'x', instructions: 'Version two.', metadata: { skillVersion: 2 } })
    t.equal((await run('after-edit')).json().run.id, after.json().run.id, 'and its key replays it')
    t.equal((await second.inject({ method: 'DELETE', url: `/api/skills/${skill.id}`, headers })).statusCode, 204)
    t.equal((await run()).statusCode, 404)
    t.equal((await run('after-delete')).statusCode, 404)
    t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from runs`)), [{ n: 2 }])
  }
)

t.test(
  'proposals: accepted into a new skill or the next version, stale and decided ones conflict, rejected content is not proposed again by a run',
  async (t) => {
    const app = await buildSkillsApp(t)
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    const propose = (payload: Record<string, unknown>) =>
      app.inject({ method: 'POST', url: '/api/skills/proposals', headers, payload })
    const decide = (id: string, how: 'accept' | 'reject') =>
      app.inject({ method: 'POST', url: `/api/skills/proposals/${id}/${how}`, headers })

    const fresh = await propose({ skillMd: FILE })
    t.equal(fresh.statusCode, 201)
    const p = fresh.json().proposal
    t.same(Object.keys(p).sort(), PROPOSAL_KEYS)
    t.match(p, { state: 'open', skillId: null, baseVersion: null, runId: null, createdBy: owner.user.id })
    const accepted = await decide(p.id, 'accept')
    t.equal(accepted.statusCode, 200)
    const { proposal, skill } = accepted.json()
    t.match(proposal, { state: 'accepted', skillId: skill.id, decidedBy: owner.user.id })
    t.match(skill, { name: 'release-notes', version: 1 })
    t.equal((await decide(p.id, 'accept')).statusCode, 409, 'decided once')
    t.equal((await decide(p.id, 'reject')).statusCode, 409)

    // against version 1; the skill moves to 2 meanwhile: accepting is 409 and changes nothing
    const change = (await propose({ skillMd: FILE.replace('Apache-2.0', 'MIT'), skillId: skill.id })).json().proposal
    t.match(change, { skillId: skill.id, baseVersion: 1 })
    const byName = (await propose({ skillMd: FILE.replace('Apache-2.0', 'BSD') })).json().proposal
    t.match(byName, { skillId: skill.id, baseVersion: 1 }, 'a file naming an existing skill proposes a change of it')
    t.equal(
      (
        await app.inject({
          method: 'PATCH',
          url: `/api/skills/${skill.id}`,
          headers,
          payload: { description: 'moved on', version: 1 }
        })
      ).statusCode,
      200
    )
    const stale = await decide(change.id, 'accept')
    t.equal(stale.statusCode, 409)
    t.match(stale.json().message, /version 2/)
    t.equal(
      (await app.inject({ method: 'GET', url: `/api/skills/${skill.id}`, headers })).json().skill.license,
      'Apache-2.0'
    )

    const current = (
      await propose({ skillMd: FILE.replace('Apache-2.0', 'MIT'), skillId: skill.id, baseVersion: 2 })
    ).json().proposal
    const next = await decide(current.id, 'accept')
    t.equal(next.statusCode, 200)
    t.match(next.json().skill, { version: 3, license: 'MIT' })

    const bad = await propose({ skillMd: 'no front matter' })
    t.equal(bad.statusCode, 400)
    t.equal((await propose({ skillMd: FILE, skillId: '0190b8f0-0000-7000-8000-000000000000' })).statusCode, 404)

    // a run proposes through the echo engine's ```skill block; rejected content never comes back
    const proposal2 = '---\nname: from-a-run\ndescription: Learned by a run\n---\n\nDo the learned thing.'
    const prompt = `Here is what I learned.\n\`\`\`skill\n${proposal2}\n\`\`\``
    const runOnce = async () => {
      const run = (await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt } })).json().run
      await waitFor(
        'the run ends',
        async () =>
          (await app.inject({ method: 'GET', url: `/api/runs/${run.id}`, headers })).json().run.status === 'succeeded'
      )
      return run.id as string
    }
    const runId = await runOnce()
    const fromRun = (await app.inject({ method: 'GET', url: '/api/skills/proposals?state=open', headers }))
      .json()
      .items.filter((i: { runId: string | null }) => i.runId === runId)
    t.equal(fromRun.length, 1)
    t.match(fromRun[0], { skillId: null, createdBy: null, skillMd: proposal2 })
    t.equal((await decide(fromRun[0].id, 'reject')).statusCode, 200)
    await runOnce()
    const fromRuns = rowsOf(
      await app.db.execute(sql`select state from skill_proposals where run_id is not null order by id`)
    )
    t.same(fromRuns, [{ state: 'rejected' }], 'the second run proposed nothing')
    const rejected = (await app.inject({ method: 'GET', url: '/api/skills/proposals?state=rejected', headers })).json()
      .items
    t.equal(rejected.length, 1)
  }
)
