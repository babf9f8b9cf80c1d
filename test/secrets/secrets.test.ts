import { randomBytes } from 'node:crypto'
import { readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { KeyRing, newKeyText } from '../../src/secrets/crypto.js'
import { Redactor } from '../../src/secrets/redact.js'
import { KEY_FILE } from '../../src/secrets/service.js'
import { startFailure } from '../../src/startup.js'
import {
  addMember,
  buildTestApp,
  createTestDatabase,
  mintKey,
  signUp,
  signUpWithOrg,
  testConfig,
  waitFor,
  type Teardown
} from '../helper.js'
import { buildGroupApp } from '../group-app.js'
import secretsRoutes from '../../src/secrets/index.js'
import secretsService from '../../src/secrets/service.js'

/** The secrets group alone, sealing with `key`. */
const buildSecretsApp = (t: Teardown, key: string) =>
  buildGroupApp(t, {
    env: { SECRETS_KEY: key },
    services: async (app, config) => {
      await app.register(secretsService, { config })
    },
    routes: [secretsRoutes]
  })

type App = Awaited<ReturnType<typeof buildTestApp>>

const KEY_A = newKeyText()
const KEY_B = newKeyText()

async function put(app: App, cookie: string, name: string, value: string) {
  return app.inject({ method: 'PUT', url: `/api/secrets/${name}`, headers: { cookie }, payload: { value } })
}

/** Everything the secrets table holds, as text: what a dump of it would show. */
async function dump(app: App): Promise<string> {
  return JSON.stringify(rowsOf(await app.db.execute(sql`select * from secrets`)))
}

t.test('sealing: a fresh nonce per write, any changed bit fails, bound to org and name', async (t) => {
  const ring = KeyRing.parse(KEY_A)
  const one = ring.seal('org1', 'TOKEN', 'hunter2')
  const two = ring.seal('org1', 'TOKEN', 'hunter2')
  t.not(one.sealed.toString('base64'), two.sealed.toString('base64'), 'the same value sealed twice differs')
  t.equal(ring.open('org1', 'TOKEN', one.keyId, one.sealed), 'hunter2')
  for (let bit = 0; bit < one.sealed.length * 8; bit += 7) {
    const flipped = Buffer.from(one.sealed)
    flipped[bit >> 3]! ^= 1 << (bit & 7)
    if (ring.open('org1', 'TOKEN', one.keyId, flipped) !== null) t.fail(`bit ${bit} flipped still opens`)
  }
  t.equal(ring.open('org2', 'TOKEN', one.keyId, one.sealed), null, 'copied to another org')
  t.equal(ring.open('org1', 'OTHER', one.keyId, one.sealed), null, 'copied to another name')
  t.equal(
    ring.open('org1\u0000TOKEN', '', one.keyId, one.sealed),
    null,
    'the org and name cannot be shifted into each other'
  )
  t.equal(KeyRing.parse(KEY_B).open('org1', 'TOKEN', one.keyId, one.sealed), null, 'another key does not open it')
  t.throws(() => KeyRing.parse('c2hvcnQ='), /SECRETS_KEY must be 32 random bytes/)
  try {
    KeyRing.parse('x'.repeat(44))
  } catch (err) {
    t.notMatch((err as Error).message, /xxxx/, 'the message never repeats the key')
  }
})

t.test('a bad key stops the boot, naming the variable and never its value', async (t) => {
  for (const env of [
    { SECRETS_KEY: 'not-a-key-but-a-password-123' },
    { SECRETS_KEY: newKeyText(), SECRETS_PREVIOUS_KEYS: `${newKeyText()},hunter2-previous` }
  ]) {
    try {
      testConfig(env)
      t.fail('accepted')
    } catch (err) {
      const message = (err as Error).message
      t.match(message, /SECRETS_(PREVIOUS_KEYS|KEY)/)
      t.notMatch(message, /password-123|hunter2/, 'the value is not in the message')
    }
  }
})

t.test('redaction: whole values, values inside others, and values split across stream pieces', async (t) => {
  const r = new Redactor([
    { name: 'TOKEN', value: 'sk-live-123' },
    { name: 'SHORT', value: 'live' }
  ])
  t.equal(
    r.text('use sk-live-123 or live'),
    'use [secret:TOKEN] or [secret:SHORT]',
    'the longer value wins where both match'
  )
  t.same(r.deep({ a: ['x sk-live-123'], 'sk-live-123': 1, n: 3 }), {
    a: ['x [secret:TOKEN]'],
    '[secret:TOKEN]': 1,
    n: 3
  })
  // every way of cutting a text into pieces gives the redacted text back, and no piece shows a value
  const text = 'a sk-live-123 b sk-live-12 c sk-sk-live-123live'
  const expected = r.text(text)
  for (let cut1 = 0; cut1 <= text.length; cut1++) {
    for (let cut2 = cut1; cut2 <= text.length; cut2 += 3) {
      const s = r.stream()
      const pieces = [s.push(text.slice(0, cut1)), s.push(text.slice(cut1, cut2)), s.push(text.slice(cut2)), s.flush()]
      if (pieces.join('') !== expected) t.fail(`cut at ${cut1}/${cut2}: ${JSON.stringify(pieces)}`)
      if (pieces.some((p) => p.includes('sk-live-123'))) t.fail(`a piece shows the value (cut at ${cut1}/${cut2})`)
    }
  }
  t.pass('every cut redacts')
})

t.test('routes: admin only, never a value, 201 then 200, 404, keys get 401', async (t) => {
  const app = await buildSecretsApp(t, KEY_A)
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }

  const created = await put(app, owner.cookie, 'GITHUB_TOKEN', 'ghp_plaintext_value_1')
  t.equal(created.statusCode, 201)
  t.same(Object.keys(created.json().secret).sort(), ['createdAt', 'lastUsedAt', 'name', 'updatedAt', 'updatedBy'])
  t.match(created.json().secret, { name: 'GITHUB_TOKEN', updatedBy: owner.user.id, lastUsedAt: null })
  const replaced = await put(app, owner.cookie, 'GITHUB_TOKEN', 'ghp_plaintext_value_2')
  t.equal(replaced.statusCode, 200, 'a new value for a known name is 200')
  t.equal(replaced.json().secret.createdAt, created.json().secret.createdAt)
  await put(app, owner.cookie, 'API_KEY', 'ak_plaintext')

  const list = await app.inject({ method: 'GET', url: '/api/secrets', headers })
  t.equal(list.statusCode, 200)
  t.same(
    list.json().items.map((s: { name: string }) => s.name),
    ['API_KEY', 'GITHUB_TOKEN'],
    'by name'
  )
  t.notMatch(list.body, /plaintext/, 'no value in the list')
  const paged = await app.inject({ method: 'GET', url: '/api/secrets?limit=1', headers })
  const next = await app.inject({
    method: 'GET',
    url: `/api/secrets?limit=1&cursor=${paged.json().nextCursor}`,
    headers
  })
  t.same(
    next.json().items.map((s: { name: string }) => s.name),
    ['GITHUB_TOKEN']
  )

  const dumped = await dump(app)
  t.notMatch(dumped, /plaintext/, 'no plaintext in a dump of the table')
  t.notMatch(dumped, /ghp_/)

  for (const [name, status] of [
    ['lower', 400],
    ['1ABC', 400],
    ['A_B-C', 400],
    ['A'.repeat(129), 400]
  ] as const) {
    t.equal((await put(app, owner.cookie, name, 'v')).statusCode, status, `${name.slice(0, 10)} is not a name`)
  }
  t.equal((await put(app, owner.cookie, 'A'.repeat(128), 'v')).statusCode, 201, 'a 128-character name')
  t.equal((await put(app, owner.cookie, 'EMPTY', '')).statusCode, 400, 'an empty value')
  const big = await put(app, owner.cookie, 'BIG', 'é'.repeat(33_000))
  t.equal(big.statusCode, 400, 'over 64 KiB of UTF-8')
  t.match(big.json(), { error: 'validation_failed', details: [{ path: '/body/value' }] })
  t.notMatch(big.body, /éé/, 'the error does not repeat the value')
  t.equal((await put(app, owner.cookie, 'MAX', 'x'.repeat(64 * 1024))).statusCode, 201, 'exactly 64 KiB')
  // paged one by one, a 128-character name is a cursor like any other
  const names: string[] = []
  let cursor: string | null = null
  do {
    const url: string = `/api/secrets?limit=1${cursor ? `&cursor=${cursor}` : ''}`
    const page = await app.inject({ method: 'GET', url, headers })
    t.equal(page.statusCode, 200, page.body.slice(0, 200))
    names.push(...page.json().items.map((s: { name: string }) => s.name))
    cursor = page.json().nextCursor
  } while (cursor && names.length < 10)
  t.same(names, ['A'.repeat(128), 'API_KEY', 'GITHUB_TOKEN', 'MAX'])
  const lower = await app.inject({
    method: 'GET',
    url: `/api/secrets?cursor=${Buffer.from('not a name').toString('base64url')}`,
    headers
  })
  t.equal(lower.statusCode, 400)
  t.match(lower.json(), { error: 'validation_failed', details: [{ path: '/querystring/cursor' }] })

  // members, other orgs, keys
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const asMember = await app.inject({
    method: 'GET',
    url: '/api/secrets',
    headers: { cookie: member.cookie, 'x-org-id': owner.org.id }
  })
  t.equal(asMember.statusCode, 403, 'a member is not an admin')
  const stranger = await signUpWithOrg(app)
  t.same(
    (await app.inject({ method: 'GET', url: '/api/secrets', headers: { cookie: stranger.cookie } })).json().items,
    [],
    'another org sees none'
  )
  t.equal(
    (await app.inject({ method: 'DELETE', url: '/api/secrets/API_KEY', headers: { cookie: stranger.cookie } }))
      .statusCode,
    404
  )
  const key = await mintKey(app, owner.cookie)
  for (const [method, url] of [
    ['GET', '/api/secrets'],
    ['PUT', '/api/secrets/X'],
    ['DELETE', '/api/secrets/API_KEY']
  ] as const) {
    const res = await app.inject({
      method,
      url,
      headers: { authorization: key.authorization },
      ...(method === 'PUT' ? { payload: { value: 'v' } } : {})
    })
    t.equal(res.statusCode, 401, `a key may not ${method} ${url}`)
  }

  t.equal((await app.inject({ method: 'DELETE', url: '/api/secrets/API_KEY', headers })).statusCode, 204)
  t.equal((await app.inject({ method: 'DELETE', url: '/api/secrets/API_KEY', headers })).statusCode, 404, 'gone')
})

t.test('a ciphertext copied to another org or name does not open', async (t) => {
  const app = await buildSecretsApp(t, KEY_A)
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  await put(app, a.cookie, 'TOKEN', 'value-of-a')
  await put(app, b.cookie, 'TOKEN', 'value-of-b')
  await put(app, a.cookie, 'OTHER', 'other-of-a')
  // b's row and a's OTHER row now carry a's TOKEN ciphertext
  await app.db
    .execute(sql`update secrets set sealed = (select sealed from secrets where org_id = ${a.org.id} and name = 'TOKEN')
    where (org_id = ${b.org.id} and name = 'TOKEN') or (org_id = ${a.org.id} and name = 'OTHER')`)
  t.same(await app.secrets.forRuns.open(a.org.id, ['TOKEN']), {
    values: [{ name: 'TOKEN', value: 'value-of-a' }],
    missing: []
  })
  t.same(
    await app.secrets.forRuns.open(b.org.id, ['TOKEN']),
    { values: [], missing: ['TOKEN'] },
    'moved to another org: does not open'
  )
  t.same(
    await app.secrets.forRuns.open(a.org.id, ['OTHER']),
    { values: [], missing: ['OTHER'] },
    'moved to another name: does not open'
  )
})

t.test('rotation: A to B (A kept as previous) re-seals every row; then A can go and nothing is lost', async (t) => {
  const db = await createTestDatabase(t)
  const first = await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_A } })
  const owner = await signUpWithOrg(first)
  const values = new Map<string, string>()
  for (let i = 0; i < 250; i++) {
    const name = `SECRET_${i}`
    const value = randomBytes(12).toString('hex')
    values.set(name, value)
    await first.secrets.put(owner.org.id, name, value, null)
  }
  await first.close()

  const rotated = await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_B, SECRETS_PREVIOUS_KEYS: KEY_A } })
  const b = KeyRing.parse(KEY_B).current.id
  await waitFor('every row sealed under B in the background', async () => {
    const rows = rowsOf<{ n: number | string }>(
      await rotated.db.execute(sql`select count(*) as n from secrets where key_id <> ${b}`)
    )
    return Number(rows[0]!.n) === 0
  })
  await rotated.close()

  const onlyB = await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_B } })
  const opened = await onlyB.secrets.forRuns.open(owner.org.id, [...values.keys()])
  t.same(opened.missing, [], 'nothing lost')
  t.same(new Map(opened.values.map((v) => [v.name, v.value])), values, 'every value as it was')
})

t.test('without SECRETS_KEY: a key file on the embedded database, 503 secrets_unavailable on Postgres', async (t) => {
  const db = await createTestDatabase(t)
  // the embedded rule: no DATABASE_URL
  const embedded = await buildTestApp(t, { db, env: { DATABASE_URL: undefined as unknown as string } })
  const owner = await signUpWithOrg(embedded)
  t.equal((await put(embedded, owner.cookie, 'TOKEN', 'v1')).statusCode, 201)
  t.ok(embedded.secrets.ring, 'a key ring from the key file')
  await embedded.close()

  const postgres = await buildTestApp(t, { db, env: { DATABASE_URL: 'postgres://unused.invalid/none' } })
  const other = await signUpWithOrg(postgres)
  for (const [method, url] of [
    ['GET', '/api/secrets'],
    ['PUT', '/api/secrets/TOKEN'],
    ['DELETE', '/api/secrets/TOKEN']
  ] as const) {
    const res = await postgres.inject({
      method,
      url,
      headers: { cookie: other.cookie },
      ...(method === 'PUT' ? { payload: { value: 'v' } } : {})
    })
    t.equal(res.statusCode, 503, `${method} ${url}`)
    t.equal(res.json().error, 'secrets_unavailable')
  }
  const run = await postgres.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie: other.cookie },
    payload: { prompt: 'hi', secrets: ['TOKEN'] }
  })
  t.equal(run.statusCode, 503, 'a run naming secrets where none can be opened')
})

t.test('the embedded key file: made once, mode 0600, reused at the next start', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs')
  const { tmpdir } = await import('node:os')
  const dir = mkdtempSync(join(tmpdir(), 'cairn-secrets-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const db = await createTestDatabase(t)
  const env = { DATABASE_URL: undefined as unknown as string, DATA_DIR: dir }
  const first = await buildTestApp(t, { db, env })
  const owner = await signUpWithOrg(first)
  await first.secrets.put(owner.org.id, 'TOKEN', 'kept', null)
  const file = join(dir, KEY_FILE)
  t.equal(statSync(file).mode & 0o777, 0o600)
  const key = readFileSync(file, 'utf8')
  await first.close()
  const second = await buildTestApp(t, { db, env })
  t.equal(readFileSync(file, 'utf8'), key, 'not made again')
  t.same((await second.secrets.forRuns.open(owner.org.id, ['TOKEN'])).values, [{ name: 'TOKEN', value: 'kept' }])
})

t.test('an instance whose SECRETS_KEY opens none of the stored secrets refuses to start, saying so', async (t) => {
  const db = await createTestDatabase(t)
  const first = await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_A } })
  // nothing stored yet: nothing to check a key against
  await (await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_B } })).close()
  const owner = await signUpWithOrg(first)
  t.equal((await put(first, owner.cookie, 'TOKEN', 'sealed under A')).statusCode, 201)

  const logs: Array<Record<string, unknown>> = []
  const refused = await buildTestApp(t, { db, logs, env: { SECRETS_KEY: KEY_B } }).then(
    () => null,
    (err: unknown) => err as Error
  )
  t.match(refused, {
    name: 'SecretsKeyMismatch',
    message: /^SECRETS_KEY \(key id [0-9a-f]{16}\) opens none of the org secrets stored in the database/
  })
  t.equal(
    startFailure(refused, testConfig({ SECRETS_KEY: KEY_B })),
    refused!.message,
    'the start fails with that one sentence (exit 1)'
  )
  t.ok(
    logs.some((l) => l.level === 50 && String(l.msg).startsWith('refusing to start: SECRETS_KEY')),
    'an error line names the problem'
  )
  t.notMatch(
    JSON.stringify(logs) + refused!.message,
    new RegExp([KEY_A, KEY_B].map((k) => k.replace(/[+/=]/g, '\\$&')).join('|')),
    'never a key'
  )

  // the same key starts; so does a new key with the old one kept as previous (a rotation)
  await (await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_A } })).close()
  const rotated = await buildTestApp(t, { db, env: { SECRETS_KEY: KEY_B, SECRETS_PREVIOUS_KEYS: KEY_A } })
  t.same((await rotated.secrets.forRuns.open(owner.org.id, ['TOKEN'])).values, [
    { name: 'TOKEN', value: 'sealed under A' }
  ])
})
