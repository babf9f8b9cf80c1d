import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { startOpenAiUpstream } from '../runs/openai-upstream.js'
import { addMember, buildTestApp, signUp, signUpWithOrg, waitFor } from '../helper.js'
import { startFakeProvider } from './fake-provider.js'

// Default model: what a run, chat, skill, automation or Slack run that names
// no model gets. Never a silent echo while something better is ready.

type App = Awaited<ReturnType<typeof buildTestApp>>
const ALLOW_PRIVATE = { PROVIDER_ALLOW_PRIVATE: 'true', SECRETS_KEY: newKeyText() }

const ended = async (app: App, headers: Record<string, string>, id: string) =>
  (await app.inject({ method: 'GET', url: `/api/runs/${id}?wait=30`, headers })).json().run

t.test("the deployment's first ready model, an admin's choice, echo only when nothing else is ready", async (t) => {
  const requests: any[] = []
  const url = await startOpenAiUpstream(t, {
    models: ['tiny-1', 'tiny-2'],
    onRequest: (req, body) => {
      if (req.url === '/v1/chat/completions') requests.push(body)
    },
    chat(_body, stream) {
      const chat = stream()
      chat.delta({ content: 'from the model' })
      chat.end()
    }
  })
  const app = await buildTestApp(t, { env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1,tiny-2' } })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers })).json(), {
    model: 'tiny-1',
    source: 'deployment'
  })
  const models = (await app.inject({ method: 'GET', url: '/api/models', headers })).json().items
  t.same(
    models.filter((m: { default: boolean }) => m.default).map((m: { id: string }) => m.id),
    ['tiny-1'],
    'GET /api/models marks it'
  )

  // a run, a skill run and a chat naming no model go to it
  const run = (await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'hello' } })).json().run
  t.match(run, { engine: 'openai', model: 'tiny-1' })
  t.match(await ended(app, headers, run.id), { status: 'succeeded', output: 'from the model' })
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      headers,
      payload: { name: 'nightly', description: 'd', instructions: 'Summarize.' }
    })
  ).json().skill
  const skillRun = (
    await app.inject({ method: 'POST', url: `/api/skills/${skill.id}/run`, headers, payload: { input: 'the day' } })
  ).json().run
  t.match(skillRun, { engine: 'openai', model: 'tiny-1' })
  await ended(app, headers, skillRun.id)
  t.same(
    requests[requests.length - 1].messages,
    [
      { role: 'system', content: 'Summarize.' },
      { role: 'user', content: 'the day' }
    ],
    "the skill's instructions as the system message"
  )
  const metered = async () =>
    rowsOf<{ runs: number; input: number }>(
      await app.db.execute(sql`
    select coalesce(sum(runs), 0)::int as runs, coalesce(sum(input_tokens), 0)::int as input from usage_hour_groups where org_id = ${owner.org.id} and model = 'tiny-1'`)
    )[0]!
  const before = await metered()
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  const chat = await fetch(`${base}/api/chat`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })
  })
  t.match(await chat.text(), /event: done\ndata: \{"model":"tiny-1"/, 'a chat naming no model')
  const chats = await waitFor('the chat is metered', async () => {
    const rows = rowsOf<{ status: string; engine: string; user_id: string; input_tokens: number }>(
      await app.db.execute(
        sql`select status, engine, user_id, input_tokens from chat_completions where org_id = ${owner.org.id}`
      )
    )
    return rows.length === 1 ? rows : null
  })
  t.same(chats, [{ status: 'succeeded', engine: 'openai', user_id: owner.user.id, input_tokens: 7 }])
  t.same(await metered(), { runs: before.runs + 1, input: before.input + 7 }, 'in the usage rollup like a run')

  // an admin chooses; a member may not; an unknown model is refused
  const member = await signUp(app)
  await addMember(app, owner.cookie, owner.org.id, member.user.email, 'member')
  const memberHeaders = { cookie: member.cookie, 'x-org-id': owner.org.id }
  const refused = await app.inject({
    method: 'PUT',
    url: '/api/models/default',
    headers: memberHeaders,
    payload: { model: 'tiny-2' }
  })
  t.equal(refused.statusCode, 403)
  const unknown = await app.inject({ method: 'PUT', url: '/api/models/default', headers, payload: { model: 'gpt-99' } })
  t.equal(unknown.statusCode, 400)
  t.match(unknown.json(), { error: 'validation_failed', message: /^\/body\/model: / })
  const chosen = await app.inject({ method: 'PUT', url: '/api/models/default', headers, payload: { model: 'tiny-2' } })
  t.same([chosen.statusCode, chosen.json()], [200, { model: 'tiny-2' }])
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers })).json(), {
    model: 'tiny-2',
    source: 'org'
  })
  t.match((await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'again' } })).json().run, {
    engine: 'openai',
    model: 'tiny-2'
  })
  // echo, chosen on purpose
  await app.inject({ method: 'PUT', url: '/api/models/default', headers, payload: { model: 'echo' } })
  t.match(
    (await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'offline' } })).json().run,
    { engine: 'echo', model: 'echo' }
  )
  // forgotten: back to the deployment's
  t.equal(
    (await app.inject({ method: 'PUT', url: '/api/models/default', headers, payload: { model: null } })).statusCode,
    200
  )
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers })).json(), {
    model: 'tiny-1',
    source: 'deployment'
  })
  // another org never sees this org's choice
  await app.inject({ method: 'PUT', url: '/api/models/default', headers, payload: { model: 'tiny-2' } })
  const other = await signUpWithOrg(app)
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers: { cookie: other.cookie } })).json(), {
    model: 'tiny-1',
    source: 'deployment'
  })
})

t.test("without a deployment model: the org providers' first ready model, else echo", async (t) => {
  const fake = await startFakeProvider(t, { models: ['prov-small', 'prov-large'] })
  const app = await buildTestApp(t, { env: ALLOW_PRIVATE })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers })).json(), {
    model: 'echo',
    source: 'echo'
  })
  t.match(
    (await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'nothing ready' } })).json().run,
    { engine: 'echo' }
  )
  const created = await app.inject({
    method: 'POST',
    url: '/api/providers',
    headers,
    payload: { name: 'Fake', baseUrl: fake.baseUrl, apiKey: fake.key }
  })
  t.equal(created.statusCode, 201)
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers })).json(), {
    model: 'prov-small',
    source: 'provider'
  })
  const run = (
    await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'to the provider' } })
  ).json().run
  t.match(run, { engine: 'openai', model: 'prov-small' })
  t.equal((await ended(app, headers, run.id)).status, 'succeeded')
  t.ok(
    fake.requests.some((r) => r.path === '/v1/chat/completions' && r.body.model === 'prov-small'),
    'the provider answered it'
  )
  const chosen = await app.inject({
    method: 'PUT',
    url: '/api/models/default',
    headers,
    payload: { model: 'prov-large' }
  })
  t.equal(chosen.statusCode, 200)
  t.same((await app.inject({ method: 'GET', url: '/api/models/default', headers })).json(), {
    model: 'prov-large',
    source: 'org'
  })
})
