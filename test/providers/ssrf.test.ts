import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { classifyAddress } from '../../src/providers/address-guard.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, createTestDatabase, secondHandle, signUpWithOrg } from '../helper.js'
import { finishedRun } from '../runs/run-helpers.js'
import { startFakeProvider } from './fake-provider.js'
import { buildProvidersApp } from './group.js'

t.test(
  'address classification (ipaddr.js ranges): always refused, refused unless private is allowed, allowed',
  async (t) => {
    const always = [
      '169.254.169.254',
      '169.254.0.1',
      'fe80::1',
      'fd00:ec2::254',
      'fd20:ce::254',
      '100.100.100.200',
      '168.63.129.16',
      '224.0.0.1',
      'ff02::1',
      '255.255.255.255',
      '::ffff:169.254.169.254',
      '::ffff:a9fe:a9fe',
      '64:ff9b::a9fe:a9fe',
      '2002:a9fe:a9fe::1',
      '::169.254.169.254'
    ]
    const privateOnes = [
      '127.0.0.1',
      '127.8.9.10',
      '::1',
      '10.1.2.3',
      '172.16.0.1',
      '192.168.1.1',
      '100.64.0.1',
      '0.0.0.0',
      '::',
      'fc00::1',
      'fd12:3456::1',
      '::ffff:127.0.0.1',
      '::ffff:10.0.0.1',
      '::ffff:7f00:1',
      '::127.0.0.1',
      '198.18.0.1',
      '240.0.0.1'
    ]
    const publicOnes = ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808']
    for (const address of always) {
      t.notOk(classifyAddress(address, false).ok, `${address} refused`)
      const allowed = classifyAddress(address, true)
      t.notOk(allowed.ok, `${address} refused even with PROVIDER_ALLOW_PRIVATE`)
    }
    for (const address of privateOnes) {
      t.notOk(classifyAddress(address, false).ok, `${address} refused`)
      t.ok(classifyAddress(address, true).ok, `${address} allowed with PROVIDER_ALLOW_PRIVATE`)
    }
    for (const address of publicOnes) t.ok(classifyAddress(address, false).ok, `${address} allowed`)
    const mapped = classifyAddress('::ffff:127.0.0.1', false)
    t.match(mapped.ok ? '' : mapped.reason, /IPv4 address 127\.0\.0\.1.*loopback/)
  }
)

t.test(
  'baseUrl: link-local, metadata, loopback and private hosts are 400 on the resolved address; nothing is stored or called',
  async (t) => {
    const fake = await startFakeProvider(t)
    const app = await buildProvidersApp(t, { env: { SECRETS_KEY: newKeyText() } })
    const owner = await signUpWithOrg(app)
    const refused = [
      'http://169.254.169.254/latest/meta-data',
      'http://[fe80::1]/v1',
      'http://metadata.google.internal/computeMetadata/v1',
      'http://[fd00:ec2::254]/v1',
      `http://localhost:${fake.port}/v1`, // a name that resolves to loopback
      `http://127.0.0.1:${fake.port}/v1`,
      `http://2130706433:${fake.port}/v1`, // 127.0.0.1 written as a number
      `http://[::1]:${fake.port}/v1`,
      `http://[::ffff:127.0.0.1]:${fake.port}/v1`, // IPv4-mapped loopback
      'http://[::ffff:169.254.169.254]/v1',
      'http://10.1.2.3/v1',
      'http://192.168.0.10/v1',
      'http://100.64.0.1/v1',
      `http://0.0.0.0:${fake.port}/v1`,
      'http://[fc00::1]/v1',
      'https://224.0.0.1/v1'
    ]
    for (const baseUrl of refused) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/providers',
        headers: { cookie: owner.cookie },
        payload: { name: 'ssrf', baseUrl, apiKey: fake.key }
      })
      t.equal(res.statusCode, 400, `${baseUrl}: ${res.body}`)
      t.equal(res.json().error, 'validation_failed', baseUrl)
      t.same(
        res.json().details.map((d: { path: string }) => d.path),
        ['/body/baseUrl'],
        baseUrl
      )
    }
    const local = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: { name: 'ssrf', baseUrl: `http://localhost:${fake.port}/v1`, apiKey: fake.key }
    })
    t.match(local.json().message, /localhost resolves to .*loopback/)
    t.match(local.json().message, /PROVIDER_ALLOW_PRIVATE/)
    t.equal(fake.requests.length, 0, 'the fake provider was never called')
    t.same(rowsOf(await app.db.execute(sql`select id from providers`)), [])
    t.same(rowsOf(await app.db.execute(sql`select name from secrets`)), [])
  }
)

t.test('PROVIDER_ALLOW_PRIVATE=true allows loopback and private addresses, never link-local or metadata', async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildProvidersApp(t, { env: { SECRETS_KEY: newKeyText(), PROVIDER_ALLOW_PRIVATE: 'true' } })
  const owner = await signUpWithOrg(app)
  for (const baseUrl of [
    'http://169.254.169.254/latest',
    'http://[fd00:ec2::254]/v1',
    'http://metadata.google.internal/v1',
    'http://[::ffff:169.254.169.254]/v1',
    'http://[fe80::1]/v1'
  ]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: { name: 'meta', baseUrl, apiKey: 'k' }
    })
    t.equal(res.statusCode, 400, baseUrl)
    t.equal(res.json().details[0].path, '/body/baseUrl')
  }
  for (const [name, baseUrl] of [
    ['by name', `http://localhost:${fake.port}/v1`],
    ['by address', `http://127.0.0.1:${fake.port}/v1`]
  ]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: { name, baseUrl, apiKey: fake.key }
    })
    t.equal(res.statusCode, 201, `${baseUrl}: ${res.body}`)
    t.equal(res.json().provider.ready, true)
  }
})

t.test(
  'requests are guarded when they are made: a stored host that now resolves to loopback is refused (DNS rebinding)',
  async (t) => {
    const fake = await startFakeProvider(t)
    const key = newKeyText()
    const db = await createTestDatabase(t)
    // the instance that accepted the providers saw them as allowed (here: private addresses
    // allowed there; in the attack, a name that resolved to a public address at first)
    const before = await buildProvidersApp(t, {
      db,
      env: { SECRETS_KEY: key, PROVIDER_ALLOW_PRIVATE: 'true', RUN_WORKER_CONCURRENCY: '0' }
    })
    const owner = await signUpWithOrg(before)
    const byName = (
      await before.inject({
        method: 'POST',
        url: '/api/providers',
        headers: { cookie: owner.cookie },
        payload: { name: 'by name', baseUrl: `http://localhost:${fake.port}/v1`, apiKey: fake.key }
      })
    ).json().provider
    const byAddress = (
      await before.inject({
        method: 'POST',
        url: '/api/providers',
        headers: { cookie: owner.cookie },
        payload: {
          name: 'by address',
          baseUrl: `http://127.0.0.1:${fake.port}/v1`,
          apiKey: fake.key,
          models: ['literal-model']
        }
      })
    ).json().provider
    t.equal(byName.ready, true)
    t.equal(byAddress.ready, true)
    const seen = fake.requests.length

    // the instance that makes the requests now: private addresses are refused there
    const after = await buildTestApp(t, { db: await secondHandle(t, db), env: { SECRETS_KEY: key, RUN_POLL_MS: '50' } })
    const checked = (
      await after.inject({
        method: 'POST',
        url: `/api/providers/${byName.id}/check`,
        headers: { cookie: owner.cookie }
      })
    ).json().provider
    t.equal(checked.ready, false)
    t.match(checked.lastError, /localhost resolves to .*loopback/)
    const literal = (
      await after.inject({
        method: 'POST',
        url: `/api/providers/${byAddress.id}/check`,
        headers: { cookie: owner.cookie }
      })
    ).json().provider
    t.equal(literal.ready, false)
    t.match(literal.lastError, /127\.0\.0\.1 is a loopback address/)
    t.equal(fake.requests.length, seen, 'no check reached the provider')

    // a run accepted while the provider was ready is refused at the connection, not sent
    await after.db.execute(sql`update providers set ready = true`)
    const run = (
      await after.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'hello', model: 'fake-small' }
      })
    ).json().run
    t.match(run, { engine: 'openai', model: 'fake-small' })
    const done = await finishedRun(after, owner.cookie, run.id)
    t.equal(done.status, 'failed')
    t.match(done.error, /^model_unavailable: .*localhost resolves to .*loopback/)
    const literalRun = (
      await after.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'hello', model: 'literal-model' }
      })
    ).json().run
    const literalDone = await finishedRun(after, owner.cookie, literalRun.id)
    t.equal(literalDone.status, 'failed')
    t.match(literalDone.error, /127\.0\.0\.1 is a loopback address/)
    t.equal(fake.requests.length, seen, 'no run reached the provider')
  }
)

t.test(
  'a provider is never Cairn itself: its listening address is refused at registration and at each connection, whatever PROVIDER_ALLOW_PRIVATE says; the requests it makes are marked',
  async (t) => {
    const fake = await startFakeProvider(t)
    for (const allowPrivate of ['true', 'false']) {
      const app = await buildProvidersApp(t, {
        env: {
          SECRETS_KEY: newKeyText(),
          PROVIDER_ALLOW_PRIVATE: allowPrivate,
          PUBLIC_URL: 'http://cairn.example.test'
        }
      })
      const owner = await signUpWithOrg(app)
      await app.listen({ port: 0, host: '127.0.0.1' })
      const port = (app.server.address() as { port: number }).port
      for (const baseUrl of [
        `http://127.0.0.1:${port}/api`,
        `http://localhost:${port}/v1`,
        `http://[::1]:${port}/v1`,
        `http://0.0.0.0:${port}/v1`,
        'http://cairn.example.test/v1'
      ]) {
        const res = await app.inject({
          method: 'POST',
          url: '/api/providers',
          headers: { cookie: owner.cookie },
          payload: { name: 'self', baseUrl, apiKey: 'k' }
        })
        t.equal(res.statusCode, 400, `${baseUrl} (PROVIDER_ALLOW_PRIVATE=${allowPrivate}): ${res.body}`)
        t.match(res.json(), {
          error: 'validation_failed',
          details: [
            {
              path: '/body/baseUrl',
              message: /this Cairn server's (own|public) address; providers may not be reached there/
            }
          ]
        })
        t.notMatch(res.json().message, /PROVIDER_ALLOW_PRIVATE/, 'allowing private addresses would not help')
      }
      t.same(rowsOf(await app.db.execute(sql`select id from providers`)), [])
      if (allowPrivate === 'false') continue

      // accepted while it was elsewhere; now it reaches Cairn's own port: refused when connecting
      const created = (
        await app.inject({
          method: 'POST',
          url: '/api/providers',
          headers: { cookie: owner.cookie },
          payload: { name: 'moved', baseUrl: `http://localhost:${fake.port}/v1`, apiKey: fake.key }
        })
      ).json().provider
      t.equal(created.ready, true)
      t.equal(fake.requests.at(-1)!.outbound, '1', "the provider's requests carry the service's mark")
      await app.db.execute(sql`update providers set base_url = ${`http://localhost:${port}/v1`}`)
      const checked = (
        await app.inject({
          method: 'POST',
          url: `/api/providers/${created.id}/check`,
          headers: { cookie: owner.cookie }
        })
      ).json().provider
      t.equal(checked.ready, false)
      t.match(checked.lastError, /^localhost reaches 127\.0\.0\.1 port \d+ is this Cairn server's own address/)
    }
  }
)

t.test('PUBLIC_URL is refused by name and by every address its name resolves to', async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildProvidersApp(t, {
    env: { SECRETS_KEY: newKeyText(), PROVIDER_ALLOW_PRIVATE: 'true', PUBLIC_URL: `http://LocalHost:${fake.port}/` }
  })
  const owner = await signUpWithOrg(app)
  for (const [baseUrl, reason] of [
    [`http://localhost:${fake.port}/v1`, `localhost:${fake.port} is this Cairn server's public address`],
    [`http://127.0.0.1:${fake.port}/v1`, `127.0.0.1 port ${fake.port} is this Cairn server's public address`]
  ] as const) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/providers',
      headers: { cookie: owner.cookie },
      payload: { name: 'public', baseUrl, apiKey: fake.key }
    })
    t.equal(res.statusCode, 400, `${baseUrl}: ${res.body}`)
    t.equal(res.json().details[0].message, `${reason}; providers may not be reached there`)
  }
  t.equal(fake.requests.length, 0)
})
