import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, signUpWithOrg, type Teardown } from '../helper.js'
import { startOpenAiUpstream } from '../runs/openai-upstream.js'
import { finishedRun, storedEventsOf } from '../runs/run-helpers.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

const finished = finishedRun
const eventsOf = storedEventsOf

/** Every row of every table that could hold what a run stored, as text. */
async function everythingStored(app: App): Promise<string> {
  const tables = [
    'runs',
    'run_events',
    'run_messages',
    'memory_captures',
    'tool_approvals',
    'tool_call_attempts',
    'knowledge_drafts',
    'artifacts',
    'idempotency_keys'
  ]
  const parts: string[] = []
  for (const table of tables)
    parts.push(JSON.stringify(rowsOf(await app.db.execute(sql.raw(`select * from ${table}`)))))
  return parts.join('\n')
}

t.test(
  'echo: a named secret is redacted from the prompt, metadata, every delta (split by a space), captures and the idempotent answer',
  async (t) => {
    const app = await buildTestApp(t, { env: { SECRETS_KEY: newKeyText(), RUN_POLL_MS: '50' } })
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    const value = 'tok3n with-space'
    t.equal(
      (await app.inject({ method: 'PUT', url: '/api/secrets/TOKEN', headers, payload: { value } })).statusCode,
      201
    )

    const unknown = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers,
      payload: { prompt: 'hi', secrets: ['TOKEN', 'NOPE'] }
    })
    t.equal(unknown.statusCode, 400)
    t.match(unknown.json(), { error: 'validation_failed', details: [{ path: '/body/secrets/1', message: /NOPE/ }] })
    t.equal(
      (await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'hi', secrets: ['lower'] } }))
        .statusCode,
      400
    )
    t.equal(
      (
        await app.inject({
          method: 'POST',
          url: '/api/runs',
          headers,
          payload: { prompt: 'hi', secrets: ['TOKEN', 'TOKEN'] }
        })
      ).statusCode,
      400,
      'a name twice'
    )

    const res = await app.inject({
      method: 'POST',
      url: '/api/runs',
      headers: { ...headers, 'idempotency-key': 'with-secret' },
      payload: {
        prompt: `Use ${value} now. Remember that the token is ${value}.`,
        secrets: ['TOKEN'],
        metadata: { note: `v=${value}` }
      }
    })
    t.equal(res.statusCode, 201)
    const run = res.json().run
    t.equal(run.prompt, 'Use [secret:TOKEN] now. Remember that the token is [secret:TOKEN].')
    t.same(run.metadata, { note: 'v=[secret:TOKEN]' })
    const done = await finished(app, owner.cookie, run.id)
    t.equal(done.status, 'succeeded')
    const events = await eventsOf(app, owner.org.id, run.id)
    const deltas = events
      .filter((e) => e.type === 'message.delta')
      .map((e) => e.data.text)
      .join('')
    t.equal(deltas, 'Use [secret:TOKEN] now. Remember that the token is [secret:TOKEN].')
    const stored = await everythingStored(app)
    t.notOk(stored.includes('tok3n'), 'the value is nowhere in what the run stored')
    const lastUsed = (await app.inject({ method: 'GET', url: '/api/secrets', headers })).json().items[0].lastUsedAt
    t.ok(lastUsed, 'lastUsedAt is set')
  }
)

t.test('a secret deleted before the run starts fails the run, saying which', async (t) => {
  const app = await buildTestApp(t, { env: { SECRETS_KEY: newKeyText(), RUN_WORKER_CONCURRENCY: '0' } })
  const owner = await signUpWithOrg(app)
  const headers = { cookie: owner.cookie }
  await app.inject({ method: 'PUT', url: '/api/secrets/GONE', headers, payload: { value: 'soon-gone' } })
  const run = (
    await app.inject({ method: 'POST', url: '/api/runs', headers, payload: { prompt: 'hi', secrets: ['GONE'] } })
  ).json().run
  await app.inject({ method: 'DELETE', url: '/api/secrets/GONE', headers })
  const worker = await buildTestApp(t, {
    db: app.testDb,
    env: { SECRETS_KEY: app.secrets.ring ? newKeyText() : '', RUN_POLL_MS: '50' }
  })
  const failed = await finished(worker, owner.cookie, run.id)
  t.equal(failed.status, 'failed')
  t.match(failed.error, /no longer has: GONE/)
})

interface Scripted {
  url: string
  requests: any[]
}

/** A model that runs `printf` of the secret in the sandbox, then streams the value back in 4-character pieces. */
async function leakyModel(t: Teardown, value: string): Promise<Scripted> {
  const state: Scripted = { url: '', requests: [] }
  state.url = await startOpenAiUpstream(t, {
    models: ['leaky'],
    chat(body, stream) {
      state.requests.push(body)
      const chat = stream()
      if (state.requests.length === 1) {
        chat.delta({ role: 'assistant', content: 'checking sk' })
        chat.delta({
          tool_calls: [
            {
              index: 0,
              id: 'c1',
              type: 'function',
              function: { name: 'shell', arguments: JSON.stringify({ command: 'printf %s "$API_TOKEN"' }) }
            }
          ]
        })
      } else {
        for (const piece of `The token is ${value}, and ${value}.`.match(/.{1,4}/gs)!) chat.delta({ content: piece })
      }
      chat.end()
    }
  })
  return state
}

t.test(
  'openai + sandbox: the secret reaches the command as an environment variable; the result, the model and every delta see [secret:NAME]',
  async (t) => {
    const value = 'sk-live-0123456789'
    const upstream = await leakyModel(t, value)
    const dataDir = await mkdtemp(join(tmpdir(), 'cairn-secret-runs-'))
    t.teardown(() => rm(dataDir, { recursive: true, force: true }))
    const app = await buildTestApp(t, {
      env: {
        SECRETS_KEY: newKeyText(),
        OPENAI_BASE_URL: upstream.url,
        MODELS: 'leaky',
        RUN_POLL_MS: '50',
        DATA_DIR: dataDir,
        SANDBOX_UNCONFINED: 'true'
      }
    })
    const owner = await signUpWithOrg(app)
    const headers = { cookie: owner.cookie }
    await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', headers, payload: { mode: 'auto' } })
    await app.inject({ method: 'PUT', url: '/api/secrets/API_TOKEN', headers, payload: { value } })
    const run = (
      await app.inject({
        method: 'POST',
        url: '/api/runs',
        headers,
        payload: { prompt: 'print the token', engine: 'openai', secrets: ['API_TOKEN'] }
      })
    ).json().run
    const done = await finished(app, owner.cookie, run.id)
    t.equal(done.status, 'succeeded', done.error ?? '')

    const events = await eventsOf(app, owner.org.id, run.id)
    const result = events.find((e) => e.type === 'tool.result')!.data
    t.equal(result.content, 'exit code 0\n[secret:API_TOKEN]', 'the sandbox had the value; the result shows the name')
    t.notOk(JSON.stringify(upstream.requests[1]).includes(value), 'the model was never sent the value')
    const deltas = events.filter((e) => e.type === 'message.delta').map((e) => e.data.text as string)
    t.ok(deltas.length > 3)
    for (const d of deltas)
      t.notOk(d.includes('sk-l') && d.includes('0123'), `no delta shows the value: ${JSON.stringify(d)}`)
    t.equal(
      deltas.join(''),
      'checking skThe token is [secret:API_TOKEN], and [secret:API_TOKEN].',
      'held pieces are sent, not lost'
    )
    t.equal(
      events.find((e) => e.type === 'message.completed')!.data.text,
      'The token is [secret:API_TOKEN], and [secret:API_TOKEN].'
    )
    // stream clients are sent the stored events (stored first, then published), so what is checked above is what they
    // got
    t.notOk((await everythingStored(app)).includes(value), 'nowhere stored')
    // the transcript keeps the result as the model saw it, and the answer, redacted
    const items = (await app.inject({ method: 'GET', url: `/api/runs/${run.id}/messages`, headers })).json().items
    t.match(
      items.find((m: { role: string }) => m.role === 'tool'),
      { content: 'exit code 0\n[secret:API_TOKEN]' }
    )
    t.equal(items.at(-1).content, 'The token is [secret:API_TOKEN], and [secret:API_TOKEN].')
  }
)
