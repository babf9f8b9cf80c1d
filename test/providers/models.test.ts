import t from 'tap'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, createTestDatabase, mintKey, secondHandle, signUpWithOrg } from '../helper.js'
import { finishedRun, storedEventsOf } from '../runs/run-helpers.js'
import { startFakeProvider } from './fake-provider.js'

const ENV = { PROVIDER_ALLOW_PRIVATE: 'true', SECRETS_KEY: newKeyText(), RUN_POLL_MS: '50' }

type App = Awaited<ReturnType<typeof buildTestApp>>

async function addProvider(app: App, cookie: string, body: Record<string, unknown>) {
  const res = await app.inject({ method: 'POST', url: '/api/providers', headers: { cookie }, payload: body })
  if (res.statusCode !== 201) throw new Error(`provider: ${res.statusCode} ${res.body}`)
  return res.json().provider as { id: string; ready: boolean; models: string[] }
}

t.test(
  "GET /api/models lists the deployment's models and the org's ready providers'; a run naming one succeeds with its text and usage",
  async (t) => {
    const fake = await startFakeProvider(t)
    const app = await buildTestApp(t, { env: ENV })
    const owner = await signUpWithOrg(app)
    const key = await mintKey(app, owner.cookie)
    const answers: string[] = []

    const empty = await app.inject({ method: 'GET', url: '/api/models', headers: { authorization: key.authorization } })
    t.equal(empty.statusCode, 200)
    t.same(
      empty.json(),
      { items: [{ id: 'echo', engine: 'echo', providerId: null, default: true }] },
      "without providers: the deployment's models"
    )

    const provider = await addProvider(app, owner.cookie, { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key })
    const models = await app.inject({
      method: 'GET',
      url: '/api/models',
      headers: { authorization: key.authorization }
    })
    answers.push(models.body)
    t.same(
      models.json().items,
      [
        { id: 'echo', engine: 'echo', providerId: null, default: false },
        { id: 'fake-small', engine: 'openai', providerId: provider.id, default: true },
        { id: 'fake-large', engine: 'openai', providerId: provider.id, default: false }
      ],
      "the provider's first model is now the org's default"
    )

    // a run through an API key, naming the provider's model
    const created = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { authorization: key.authorization },
      payload: { prompt: 'Say hello', model: 'fake-small' }
    })
    answers.push(created.body)
    t.equal(created.statusCode, 201, created.body)
    const run = created.json().run
    t.match(run, { engine: 'openai', model: 'fake-small', status: 'queued' })
    const done = await finishedRun(app, owner.cookie, run.id)
    t.equal(done.status, 'succeeded', done.error ?? '')
    const events = await storedEventsOf(app, owner.org.id, run.id)
    answers.push(JSON.stringify(events))
    t.same(
      events.filter((e) => e.type === 'message.delta').map((e) => e.data.text),
      ['Hello', ' from', ' the', ' fake', ' provider']
    )
    t.same(events.find((e) => e.type === 'message.completed')?.data, { text: 'Hello from the fake provider' })
    t.same(
      events.find((e) => e.type === 'run.succeeded')?.data,
      { usage: { promptTokens: 11, completionTokens: 5 } },
      "the provider's token counts"
    )
    const chat = fake.requests.find((r) => r.path === '/v1/chat/completions')!
    t.equal(chat.authorization, `Bearer ${fake.key}`)
    t.match(chat.body, {
      model: 'fake-small',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Say hello' }]
    })

    // explicit engine openai with the provider's model: the same
    const explicit = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'again', engine: 'openai', model: 'fake-large' }
    })
    t.equal(explicit.statusCode, 201)
    t.equal((await finishedRun(app, owner.cookie, explicit.json().run.id)).status, 'succeeded')

    // an unknown model answers as before; echo runs as before
    const unknown = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'x', model: 'no-such-model' }
    })
    t.equal(unknown.statusCode, 400)
    t.equal(unknown.json().error, 'engine_unavailable')
    t.match(unknown.json().message, /no-such-model/)
    const echoModel = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'x', engine: 'echo', model: 'fake-small' }
    })
    t.equal(echoModel.statusCode, 400, "another engine does not serve a provider's model")
    const echo = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'plain echo', engine: 'echo' }
      })
    ).json().run
    t.match(await finishedRun(app, owner.cookie, echo.id), { status: 'succeeded', engine: 'echo' })

    // chat names the provider's model too
    const base = await app.listen({ port: 0, host: '127.0.0.1' })
    const chatRes = await fetch(`${base}/api/chat`, {
      method: 'POST',
      headers: { cookie: owner.cookie, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], model: 'fake-small' })
    })
    t.equal(chatRes.status, 200)
    const chatText = await chatRes.text()
    answers.push(chatText)
    t.match(chatText, /event: token\ndata: \{"text":" fake"\}/)
    t.match(chatText, /event: done\ndata: \{"model":"fake-small","usage":\{"inputTokens":11,"outputTokens":5\}\}/)

    for (const body of answers) t.notOk(body.includes(fake.key), 'no answer carries the key')
  }
)

t.test(
  "an automation can name a provider's model: saved, triggered and run through the provider; another org's cannot",
  async (t) => {
    const fake = await startFakeProvider(t)
    const app = await buildTestApp(t, { env: ENV })
    const owner = await signUpWithOrg(app)
    const other = await signUpWithOrg(app)
    await addProvider(app, owner.cookie, { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key })
    const body = {
      name: 'Morning',
      cron: '0 9 * * *',
      timezone: 'UTC',
      target: { prompt: 'Say hello', model: 'fake-small' }
    }
    const created = await app.inject({
      method: 'POST',
      url: '/api/automations',
      headers: { cookie: owner.cookie },
      payload: body
    })
    t.equal(created.statusCode, 201, created.body)
    const refused = await app.inject({
      method: 'POST',
      url: '/api/automations',
      headers: { cookie: other.cookie },
      payload: body
    })
    t.equal(refused.statusCode, 400, 'an org without the provider cannot name its model')
    t.equal(refused.json().error, 'engine_unavailable')
    const triggered = await app.inject({
      method: 'POST',
      url: `/api/automations/${created.json().automation.id}/trigger`,
      headers: { cookie: owner.cookie }
    })
    t.equal(triggered.statusCode, 201, triggered.body)
    t.match(triggered.json().run, { engine: 'openai', model: 'fake-small', origin: 'automation' })
    const done = await finishedRun(app, owner.cookie, triggered.json().run.id)
    t.equal(done.status, 'succeeded', done.error ?? '')
    t.match(
      fake.requests.find((r) => r.path === '/v1/chat/completions')?.body,
      { model: 'fake-small' },
      'the provider answered it'
    )
  }
)

t.test(
  'a provider that is not ready is not listed, yet its runs fail saying why; one deleted fails the runs it had queued',
  async (t) => {
    const fake = await startFakeProvider(t)
    const db = await createTestDatabase(t)
    // this instance accepts runs but executes none, so a run can wait while its provider goes
    const app = await buildTestApp(t, { db, env: { ...ENV, RUN_WORKER_CONCURRENCY: '0' } })
    const owner = await signUpWithOrg(app)
    const broken = await addProvider(app, owner.cookie, {
      name: 'Broken',
      baseUrl: fake.baseUrl,
      apiKey: 'sk-wrong',
      models: ['only-broken']
    })
    t.equal(broken.ready, false)
    const listed = (await app.inject({ method: 'GET', url: '/api/models', headers: { cookie: owner.cookie } })).json()
      .items
    t.notOk(
      listed.some((m: { id: string }) => m.id === 'only-broken'),
      'not listed'
    )
    // still configured: a run naming it is accepted and fails saying why (not refused as an unknown model)
    const accepted = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'x', model: 'only-broken' }
    })
    t.equal(accepted.statusCode, 201, accepted.body)
    t.same(
      (await app.inject({ method: 'GET', url: '/api/models/default', headers: { cookie: owner.cookie } })).json(),
      { model: 'only-broken', source: 'provider' },
      'the default follows configuration, not the last check'
    )

    const good = await addProvider(app, owner.cookie, { name: 'Good', baseUrl: fake.baseUrl, apiKey: fake.key })
    const queued = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'x', model: 'fake-small' }
      })
    ).json().run
    t.equal(queued.model, 'fake-small')
    t.equal(
      (await app.inject({ method: 'DELETE', url: `/api/providers/${good.id}`, headers: { cookie: owner.cookie } }))
        .statusCode,
      204
    )
    // an instance that executes runs picks it up: its provider is gone
    await buildTestApp(t, { db: await secondHandle(t, db), env: ENV })
    const done = await finishedRun(app, owner.cookie, queued.id)
    t.equal(done.status, 'failed')
    t.match(await finishedRun(app, owner.cookie, accepted.json().run.id), {
      status: 'failed',
      error: /^upstream_error: HTTP 401/
    })
    t.match(done.error, /^model_unavailable: no provider of this organization offers "fake-small"/)
    t.same(
      fake.requests.filter((r) => r.path === '/v1/chat/completions').map((r) => r.body.model),
      ['only-broken'],
      "nothing was sent for the deleted provider's run"
    )
  }
)

t.test(
  "two providers offering one id: the oldest serves it, listed once; the deployment's ids cannot be taken over",
  async (t) => {
    const first = await startFakeProvider(t, { models: ['shared', 'first-only'] })
    const second = await startFakeProvider(t, { models: ['shared', 'second-only', 'echo'] })
    const app = await buildTestApp(t, { env: ENV })
    const owner = await signUpWithOrg(app)
    const one = await addProvider(app, owner.cookie, { name: 'One', baseUrl: first.baseUrl, apiKey: first.key })
    const two = await addProvider(app, owner.cookie, { name: 'Two', baseUrl: second.baseUrl, apiKey: second.key })
    const items = (await app.inject({ method: 'GET', url: '/api/models', headers: { cookie: owner.cookie } })).json()
      .items
    t.same(items, [
      { id: 'echo', engine: 'echo', providerId: null, default: false },
      { id: 'shared', engine: 'openai', providerId: one.id, default: true },
      { id: 'first-only', engine: 'openai', providerId: one.id, default: false },
      { id: 'second-only', engine: 'openai', providerId: two.id, default: false }
    ])
    const shared = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'who', model: 'shared' }
      })
    ).json().run
    t.equal((await finishedRun(app, owner.cookie, shared.id)).status, 'succeeded')
    t.ok(
      first.requests.some((r) => r.path === '/v1/chat/completions'),
      'the oldest provider answered'
    )
    t.notOk(
      second.requests.some((r) => r.path === '/v1/chat/completions'),
      'the other did not'
    )
    const secondOnly = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'who', model: 'second-only' }
      })
    ).json().run
    t.equal((await finishedRun(app, owner.cookie, secondOnly.id)).status, 'succeeded')
    t.ok(second.requests.some((r) => r.path === '/v1/chat/completions' && r.body.model === 'second-only'))
    const echo = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers: { cookie: owner.cookie },
        payload: { prompt: 'still echo', model: 'echo' }
      })
    ).json().run
    t.equal(echo.engine, 'echo')
  }
)

t.test("a provider's failure fails the run with a clear error that never carries the key", async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildTestApp(t, { env: ENV })
  const owner = await signUpWithOrg(app)
  await addProvider(app, owner.cookie, { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key })
  // the provider stops accepting the key it was given (it quotes the key it got in its 401 body)
  const given = fake.key
  fake.key = 'sk-rotated-upstream'
  const run = (
    await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { cookie: owner.cookie },
      payload: { prompt: 'x', model: 'fake-small' }
    })
  ).json().run
  const done = await finishedRun(app, owner.cookie, run.id)
  t.equal(done.status, 'failed')
  t.match(done.error, /^upstream_error: HTTP 401/)
  t.notOk(done.error.includes(given), `the key is cut out: ${done.error}`)
  t.match(done.error, /\[provider key\]/)
  const events = await storedEventsOf(app, owner.org.id, run.id)
  t.notOk(JSON.stringify(events).includes(given))
})

t.test("tenancy: another org's provider is a 404 and offers it nothing", async (t) => {
  const fake = await startFakeProvider(t)
  const app = await buildTestApp(t, { env: ENV })
  const owner = await signUpWithOrg(app)
  const other = await signUpWithOrg(app)
  const otherKey = await mintKey(app, other.cookie)
  const provider = await addProvider(app, owner.cookie, { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key })
  const seen = fake.requests.length

  const check = await app.inject({
    method: 'POST',
    url: `/api/providers/${provider.id}/check`,
    headers: { cookie: other.cookie }
  })
  t.equal(check.statusCode, 404)
  t.equal(check.json().error, 'not_found')
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/providers/${provider.id}`, headers: { cookie: other.cookie } }))
      .statusCode,
    404
  )
  t.same(
    (await app.inject({ method: 'GET', url: '/api/providers', headers: { cookie: other.cookie } })).json().items,
    []
  )
  const models = (
    await app.inject({ method: 'GET', url: '/api/models', headers: { authorization: otherKey.authorization } })
  ).json().items
  t.same(models, [{ id: 'echo', engine: 'echo', providerId: null, default: true }])
  const run = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie: other.cookie },
    payload: { prompt: 'x', model: 'fake-small' }
  })
  t.equal(run.statusCode, 400)
  t.equal(run.json().error, 'engine_unavailable')
  // the same name is free in another org
  const same = await app.inject({
    method: 'POST',
    url: '/api/providers',
    headers: { cookie: other.cookie },
    payload: { name: 'Fake', baseUrl: fake.baseUrl, apiKey: 'sk-theirs' }
  })
  t.equal(same.statusCode, 201)
  t.equal(fake.requests.length, seen + 1, "only the other org's own check reached the provider")
  // the owner's provider is untouched
  t.match(
    (await app.inject({ method: 'GET', url: '/api/providers', headers: { cookie: owner.cookie } })).json().items,
    [{ id: provider.id, ready: true }]
  )
})
