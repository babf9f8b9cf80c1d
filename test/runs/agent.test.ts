import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { and, eq } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { automations } from '../../src/automations/tables.js'
import { runs } from '../../src/runs/tables.js'
import { upload } from '../artifacts/helpers.js'
import { buildTestApp, createTestDatabase, secondHandle, signUpWithOrg, waitFor } from '../helper.js'
import artifactsRoutes from '../../src/artifacts/index.js'
import skillsRoutes from '../../src/skills/index.js'
import { buildRunsApp } from './group.js'
import { startOpenAiUpstream } from './openai-upstream.js'
import { storedEventsOf } from './run-helpers.js'

// Runs that keep their result, see their thread, and take the agent's configuration:
// with the offline echo engine, and with a local OpenAI-compatible server that records
// every request it receives.

type App = Awaited<ReturnType<typeof buildRunsApp>>

const post = async (app: App, payload: Record<string, unknown>) =>
  app.inject({ method: 'POST', url: '/api/runs', payload })
const ended = async (app: App, id: string) => {
  const res = await app.inject({ method: 'GET', url: `/api/runs/${id}?wait=30` })
  return res.json().run
}
const runsOfThread = async (app: App, rootRunId: string) =>
  app.db
    .select()
    .from(runs)
    .where(and(eq(runs.orgId, DEV_ORG.id), eq(runs.rootRunId, rootRunId)))

t.test('a run keeps its output and usage; ?wait answers when it ends', async (t) => {
  const app = await buildRunsApp(t)
  const created = await post(app, { prompt: 'the answer is kept' })
  t.equal(created.statusCode, 201)
  t.match(created.json().run, {
    output: null,
    usage: null,
    instructions: null,
    attachments: [],
    settings: { temperature: null, maxOutputTokens: null, responseFormat: null, tools: null }
  })
  const run = await ended(app, created.json().run.id)
  t.equal(run.status, 'succeeded')
  t.equal(run.output, 'the answer is kept')
  t.same(run.usage, null, 'echo calls no model: it reports no usage')
  const [row] = await app.db.select().from(runs).where(eq(runs.id, run.id))
  t.equal(row!.output, 'the answer is kept', 'stored on the run, not derived from events')
  // an ended run answers at once, whatever the wait
  const again = await app.inject({ method: 'GET', url: `/api/runs/${run.id}?wait=60` })
  t.equal(again.json().run.output, 'the answer is kept')
  for (const wait of ['-1', '61', 'x']) {
    const bad = await app.inject({ method: 'GET', url: `/api/runs/${run.id}?wait=${wait}` })
    t.equal(bad.statusCode, 400, `wait=${wait}`)
    t.equal(bad.json().error, 'validation_failed')
  }
})

t.test('?wait answers with the run as it is when the time is up', async (t) => {
  const app = await buildRunsApp(t, { env: { RUN_WORKER_CONCURRENCY: '0' } })
  const run = (await post(app, { prompt: 'nobody runs me' })).json().run
  const started = Date.now()
  const res = await app.inject({ method: 'GET', url: `/api/runs/${run.id}?wait=1` })
  t.equal(res.statusCode, 200)
  t.equal(res.json().run.status, 'queued')
  t.ok(Date.now() - started >= 900, 'it waited for the time asked')
  const other = await app.inject({ method: 'GET', url: '/api/runs/01900000-0000-7000-8000-000000000000?wait=1' })
  t.equal(other.statusCode, 404)
})

t.test('a thread remembers: earlier succeeded turns go with every run, failed ones do not', async (t) => {
  const app = await buildRunsApp(t)
  const first = await ended(app, (await post(app, { prompt: 'My name is Priya' })).json().run.id)
  const failed = await ended(
    app,
    (
      await post(app, {
        prompt: 'not json',
        rootRunId: first.id,
        responseFormat: { type: 'json_schema', name: 'strict', schema: { type: 'object', required: ['answer'] } }
      })
    ).json().run.id
  )
  t.equal(failed.status, 'failed')
  t.match(failed.error, /^output_invalid: /)
  t.equal(failed.output, null)
  const second = await ended(app, (await post(app, { prompt: 'I live in Lisbon', rootRunId: first.id })).json().run.id)
  const asked = await ended(app, (await post(app, { prompt: 'history', rootRunId: second.id })).json().run.id)
  t.equal(
    asked.output,
    'history: 2 turns: My name is Priya | I live in Lisbon',
    'oldest first, the failed run left out'
  )
  const started = (await storedEventsOf(app, DEV_ORG.id, asked.id)).find((e) => e.type === 'run.started')!
  t.match(started.data, { contextTurns: 2, droppedTurns: 0 })
  const firstStarted = (await storedEventsOf(app, DEV_ORG.id, first.id)).find((e) => e.type === 'run.started')!
  t.match(firstStarted.data, { contextTurns: 0, droppedTurns: 0 })
})

t.test('MODEL_CONTEXT_TOKENS drops the oldest whole turns; the prompt is always sent', async (t) => {
  // 1,000 tokens: 3,000 bytes for the earlier turns, the instructions and the prompt
  const app = await buildRunsApp(t, { env: { MODEL_CONTEXT_TOKENS: '1000' } })
  const long = (n: number) => `turn${n} ${'x'.repeat(600)}`
  const root = await ended(app, (await post(app, { prompt: long(1) })).json().run.id)
  for (const n of [2, 3]) await ended(app, (await post(app, { prompt: long(n), rootRunId: root.id })).json().run.id)
  const asked = await ended(app, (await post(app, { prompt: 'history', rootRunId: root.id })).json().run.id)
  // each turn is about 1,220 bytes (prompt and its echo): the two newest fit
  t.match(asked.output, /^history: 2 turns: turn2 x+ \| turn3 x+$/)
  const started = (await storedEventsOf(app, DEV_ORG.id, asked.id)).find((e) => e.type === 'run.started')!
  t.match(started.data, { contextTurns: 2, droppedTurns: 1 })
})

t.test('multitask: runs of one thread never overlap; reject and interrupt', async (t) => {
  const app = await buildRunsApp(t, { env: { ECHO_WORD_DELAY_MS: '40' } })
  const slow = Array.from({ length: 40 }, (_, i) => `w${i}`).join(' ')
  const first = (await post(app, { prompt: slow })).json().run
  const queuedBehind = (await post(app, { prompt: 'after you', rootRunId: first.id })).json().run
  // wait until the first runs, then try the three modes
  await waitFor(
    'the first run to start',
    async () => (await app.inject({ url: `/api/runs/${first.id}` })).json().run.status === 'running'
  )
  t.equal(
    (await app.inject({ url: `/api/runs/${queuedBehind.id}` })).json().run.status,
    'queued',
    'the next run waits for the running one'
  )
  const before = (await runsOfThread(app, first.id)).length
  const refused = await post(app, { prompt: 'me too', rootRunId: first.id, multitask: 'reject' })
  t.equal(refused.statusCode, 409)
  t.equal(refused.json().error, 'thread_busy')
  t.equal((await runsOfThread(app, first.id)).length, before, 'nothing was created')
  const interrupting = (
    await post(app, { prompt: 'stop and do this', rootRunId: first.id, multitask: 'interrupt' })
  ).json().run
  const done = await ended(app, interrupting.id)
  t.equal(done.status, 'succeeded')
  const cut = await ended(app, first.id)
  const skipped = await ended(app, queuedBehind.id)
  t.match(cut, { status: 'cancelled', error: 'interrupted' })
  t.match(skipped, { status: 'cancelled', error: 'interrupted' })
  t.ok(
    new Date(done.startedAt) >= new Date(cut.finishedAt),
    'the interrupting run started after the interrupted one ended'
  )
  // enqueue (the default) in order: each starts after the previous ended
  const a = (await post(app, { prompt: 'one two three', rootRunId: first.id })).json().run
  const b = (await post(app, { prompt: 'four five', rootRunId: first.id, multitask: 'enqueue' })).json().run
  const [ra, rb] = [await ended(app, a.id), await ended(app, b.id)]
  t.ok(new Date(rb.startedAt) >= new Date(ra.finishedAt), 'enqueued runs run one after the other')
  t.equal(rb.status, 'succeeded')
  const bad = await post(app, { prompt: 'x', rootRunId: first.id, multitask: 'sometimes' })
  t.equal(bad.statusCode, 400)
})

const schemaOf = (schema: Record<string, unknown>, prompt?: string) => ({
  ...(prompt ? { prompt } : {}),
  responseFormat: { type: 'json_schema', name: 's', schema }
})
/** `n` definitions, each an object holding the next: 2 levels of nesting each, references followed */
const chainOf = (n: number) => ({
  $defs: Object.fromEntries(
    Array.from({ length: n }, (_, i) => [
      `d${i}`,
      i === n - 1 ? { type: 'string' } : { type: 'object', properties: { x: { $ref: `#/$defs/d${i + 1}` } } }
    ])
  ),
  $ref: '#/$defs/d0'
})

t.test('instructions, settings and their refusals', async (t) => {
  const app = await buildRunsApp(t)
  const asked = (
    await post(app, {
      prompt: 'configured',
      instructions: 'You are terse.',
      temperature: 0.2,
      maxOutputTokens: 300,
      tools: ['read_file', 'list_files']
    })
  ).json().run
  t.match(asked, {
    instructions: 'You are terse.',
    settings: { temperature: 0.2, maxOutputTokens: 300, responseFormat: null, tools: ['read_file', 'list_files'] }
  })
  const count = async () => (await app.db.select().from(runs)).length
  const before = await count()
  const refusals: Array<[Record<string, unknown>, RegExp]> = [
    [{ tools: ['read_file', 'rm_rf'] }, /^\/body\/tools\/1/],
    [{ temperature: 3 }, /temperature/],
    [{ maxOutputTokens: 0 }, /maxOutputTokens/],
    [{ instructions: 'x'.repeat(32_001) }, /instructions/],
    [{ responseFormat: { type: 'xml' } }, /responseFormat/],
    [
      { responseFormat: { type: 'json_schema', name: 'bad', schema: { type: 'nonsense' } } },
      /^\/body\/responseFormat\/schema: not a usable JSON Schema/
    ],
    [{ responseFormat: { type: 'json_schema', name: 'big', schema: { description: 'x'.repeat(70_000) } } }, /64 KB/],
    // patterns run on RE2: what needs backtracking is refused
    [
      schemaOf({ type: 'string', pattern: '^(?=a)a+$' }),
      /the pattern "\^\(\?=a\)a\+\$" cannot be matched in linear time/
    ],
    [schemaOf({ type: 'string', pattern: '^(a)\\1$' }), /cannot be matched in linear time/],
    [schemaOf({ type: 'object', patternProperties: { '(?<!x)y': {} } }), /cannot be matched in linear time/],
    [schemaOf({ type: 'string', pattern: '(' }), /is not a regular expression/],
    // references: inside the schema, never back into themselves, nesting bounded
    [schemaOf({ $ref: '#' }), /refers to the whole schema: recursive schemas are not accepted/],
    [
      schemaOf({ type: 'object', properties: { child: { $ref: '#' } } }),
      /refers to the whole schema: recursive schemas are not accepted/
    ],
    [
      schemaOf({
        $defs: { node: { type: 'object', properties: { next: { $ref: '#/$defs/node' } } } },
        $ref: '#/$defs/node'
      }),
      /leads back into itself/
    ],
    [
      schemaOf({ $defs: { a: { $ref: '#/$defs/b' }, b: { items: { $ref: '#/$defs/a' } } }, $ref: '#/$defs/a' }),
      /leads back into itself/
    ],
    // a property may be named like a keyword: its schema is checked all the same
    [
      schemaOf({ type: 'object', properties: { default: { $ref: '#' } } }),
      /refers to the whole schema: recursive schemas are not accepted/
    ],
    [schemaOf({ type: 'object', properties: { enum: { pattern: '(?=a)' } } }), /cannot be matched in linear time/],
    [schemaOf({ $ref: 'https://example.com/schema.json' }), /leaves the schema/],
    [schemaOf({ $ref: '#/$defs/missing' }), /points at nothing/],
    [schemaOf({ properties: { a: { $id: 'other', type: 'string' } } }), /nested \$id/],
    [schemaOf({ $recursiveRef: '#' }), /may not refer to itself/],
    [schemaOf(chainOf(40)), /nests deeper than 64 levels/]
  ]
  for (const [extra, message] of refusals) {
    const res = await post(app, { prompt: 'refused', ...extra })
    t.equal(res.statusCode, 400, JSON.stringify(extra).slice(0, 80))
    t.equal(res.json().error, 'validation_failed')
    t.match(res.json().message, message)
  }
  t.equal(await count(), before, 'no refused run was stored')
  // a shared, acyclic reference and a pattern that used to backtrack are accepted
  for (const schema of [
    { $defs: { s: { type: 'string' } }, type: 'object', properties: { echo: { $ref: '#/$defs/s' } } },
    { type: 'object', properties: { echo: { type: 'string', pattern: '^(a+)+$' } } },
    chainOf(10)
  ])
    t.equal((await post(app, schemaOf(schema, 'accepted'))).statusCode, 201, JSON.stringify(schema).slice(0, 80))

  const schema = {
    type: 'object',
    properties: { echo: { type: 'string' } },
    required: ['echo'],
    additionalProperties: false
  }
  const json = await ended(
    app,
    (await post(app, { prompt: 'give me json', responseFormat: { type: 'json_schema', name: 'reply', schema } })).json()
      .run.id
  )
  t.equal(json.status, 'succeeded')
  t.same(JSON.parse(json.output), { echo: 'give me json' })
  const object = await ended(
    app,
    (await post(app, { prompt: 'any object', responseFormat: { type: 'json_object' } })).json().run.id
  )
  t.same(JSON.parse(object.output), { echo: 'any object' })
  const wrong = await ended(
    app,
    (
      await post(app, {
        prompt: 'must fail',
        responseFormat: {
          type: 'json_schema',
          name: 'reply',
          schema: { type: 'object', properties: { echo: { type: 'integer' } } }
        }
      })
    ).json().run.id
  )
  t.match(wrong, { status: 'failed', error: 'output_invalid: /echo must be integer', output: null })
})

t.test('patterns that backtrack elsewhere run in linear time over the output, off the event loop', async (t) => {
  // the model answers whatever the test puts here
  let answer = ''
  const url = await startOpenAiUpstream(t, {
    models: ['tiny-1'],
    chat(_body, stream) {
      const chat = stream()
      chat.delta({ content: answer })
      chat.end()
    }
  })
  // the whole app: GET /api/health (the system group's) answers while runs end
  const app = await buildTestApp(t, { env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1' } })
  const run = async (pattern: string, value: string) => {
    answer = JSON.stringify({ n: value })
    const created = await post(app, {
      prompt: 'n please',
      model: 'tiny-1',
      ...schemaOf({ type: 'object', properties: { n: { type: 'string', pattern } }, required: ['n'] })
    })
    t.equal(created.statusCode, 201, `${pattern} is accepted`)
    // the service answers while the run ends: its health check and the run's end, together
    const [health, ended_] = await Promise.all([app.inject({ url: '/api/health' }), ended(app, created.json().run.id)])
    t.equal(health.statusCode, 200)
    return ended_
  }
  // each of these took a backtracking engine minutes or more: here, a verdict
  for (const [pattern, unit] of [
    ['^(\\d|\\d\\d)+$', '1'],
    ['^(a|aa)+$', 'a'],
    ['^(a+)+$', 'a']
  ] as const) {
    const failed = await run(pattern, `${unit.repeat(5000)}!`)
    t.match(failed, { status: 'failed', error: /^output_invalid: \/n must match pattern/, output: null }, pattern)
    const held = await run(pattern, unit.repeat(5000))
    t.equal(held.status, 'succeeded', `${pattern} holds for a matching answer`)
  }
})

t.test('a check that takes too long fails its run; requests are answered meanwhile', async (t) => {
  // `uniqueItems` compares every pair of items: 20,000 distinct objects are 2e8 comparisons
  const big = JSON.stringify(Array.from({ length: 20_000 }, (_, i) => ({ i })))
  let answer = big
  const url = await startOpenAiUpstream(t, {
    models: ['tiny-1'],
    chat(_body, stream) {
      const chat = stream()
      chat.delta({ content: answer })
      chat.end()
    }
  })
  // the whole app: GET /api/health (the system group's) answers while the check runs
  const app = await buildTestApp(t, {
    env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1', RUN_OUTPUT_CHECK_TIMEOUT_MS: '2000' }
  })
  const created = await post(app, {
    prompt: 'pairs',
    model: 'tiny-1',
    ...schemaOf({ type: 'array', uniqueItems: true })
  })
  t.equal(created.statusCode, 201)
  await waitFor('the output check to start', async () => app.runs.outputCheck.pending > 0)
  const health = await app.inject({ url: '/api/health' })
  t.equal(health.statusCode, 200, 'the health check answers while the output is being checked')
  t.equal(app.runs.outputCheck.pending, 1, 'the check was still under way when it answered')
  const run = await ended(app, created.json().run.id)
  t.match(run, {
    status: 'failed',
    error: 'output_invalid: the output could not be checked against the schema within 2000 ms',
    output: null
  })
  // the next check gets a new thread
  answer = JSON.stringify([1, 2, 3])
  const next = await ended(
    app,
    (await post(app, { prompt: 'small', model: 'tiny-1', ...schemaOf({ type: 'array', uniqueItems: true }) })).json()
      .run.id
  )
  t.equal(next.status, 'succeeded')
  answer = JSON.stringify([1, 1])
  const dup = await ended(
    app,
    (await post(app, { prompt: 'dup', model: 'tiny-1', ...schemaOf({ type: 'array', uniqueItems: true }) })).json().run
      .id
  )
  t.match(dup.error, /^output_invalid: \/ must NOT have duplicate items/)
  // an output nested deeper than the bound is refused before any keyword looks at it
  answer = `${'['.repeat(200)}${']'.repeat(200)}`
  const deep = await ended(
    app,
    (await post(app, { prompt: 'deep', model: 'tiny-1', ...schemaOf({ type: 'array', uniqueItems: true }) })).json().run
      .id
  )
  t.equal(deep.error, 'output_invalid: the output nests deeper than 128 levels')
})

t.test('the model request carries instructions, the thread, settings and only the allowed tools', async (t) => {
  const requests: any[] = []
  const url = await startOpenAiUpstream(t, {
    models: ['tiny-1'],
    onRequest: (req, body) => {
      if (req.url === '/v1/chat/completions') requests.push(body)
    },
    chat(body, stream) {
      const chat = stream()
      const last = body.messages[body.messages.length - 1].content as string
      chat.delta({ content: last === 'What is my name?' ? 'Priya.' : body.response_format ? '{"ok":true}' : 'Noted.' })
      chat.end({ prompt_tokens: 11, completion_tokens: 2 })
    }
  })
  const app = await buildRunsApp(t, { env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1' }, runtime: true })
  const first = await ended(app, (await post(app, { prompt: 'My name is Priya', model: 'tiny-1' })).json().run.id)
  t.equal(first.output, 'Noted.')
  t.same(first.usage, { inputTokens: 11, outputTokens: 2 })
  const second = await ended(
    app,
    (
      await post(app, {
        prompt: 'What is my name?',
        model: 'tiny-1',
        rootRunId: first.id,
        instructions: 'Answer in one word.',
        temperature: 0,
        maxOutputTokens: 20,
        tools: ['read_file']
      })
    ).json().run.id
  )
  t.equal(second.output, 'Priya.')
  const sent = requests[requests.length - 1]
  t.same(sent.messages, [
    { role: 'system', content: 'Answer in one word.' },
    { role: 'user', content: 'My name is Priya' },
    { role: 'assistant', content: 'Noted.' },
    { role: 'user', content: 'What is my name?' }
  ])
  t.equal(sent.temperature, 0)
  t.equal(sent.max_tokens, 20)
  if (app.runtime.sandboxes)
    t.same(
      sent.tools.map((d: any) => d.function.name),
      ['read_file'],
      'only the tools the run allows'
    )
  const none = await ended(app, (await post(app, { prompt: 'no tools', model: 'tiny-1', tools: [] })).json().run.id)
  t.equal(none.status, 'succeeded')
  t.equal(requests[requests.length - 1].tools, undefined, 'tools: [] offers none')
  const json = await ended(
    app,
    (
      await post(app, {
        prompt: 'json please',
        model: 'tiny-1',
        responseFormat: { type: 'json_schema', name: 'ok', schema: { type: 'object', required: ['ok'] } }
      })
    ).json().run.id
  )
  t.equal(json.status, 'succeeded')
  t.same(requests[requests.length - 1].response_format, {
    type: 'json_schema',
    json_schema: { name: 'ok', schema: { type: 'object', required: ['ok'] } }
  })
})

t.test("a skill run: the skill's instructions first, its allowed-tools cut the caller's tools", async (t) => {
  const app = await buildRunsApp(t, { routes: [skillsRoutes] })
  const skill = (
    await app.inject({
      method: 'POST',
      url: '/api/skills',
      payload: {
        name: 'gitter',
        description: 'd',
        instructions: 'Use git.',
        allowedTools: ['Bash(git:*)', 'Read', 'Grep']
      }
    })
  ).json().skill
  t.same(skill.warnings, [
    'allowed-tools names "Bash(git:*)": runs get shell, without its argument pattern',
    'allowed-tools names "Grep", which Cairn does not have: runs of this skill do not get it'
  ])
  const res = await app.inject({
    method: 'POST',
    url: `/api/skills/${skill.id}/run`,
    payload: { input: 'status?', instructions: 'Be brief.', tools: ['read_file', 'write_file'], temperature: 1 }
  })
  t.equal(res.statusCode, 201)
  t.match(res.json().run, {
    prompt: 'status?',
    instructions: 'Use git.\n\nBe brief.',
    settings: { tools: ['read_file'], temperature: 1 }
  })
  const own = (await app.inject({ method: 'POST', url: `/api/skills/${skill.id}/run`, payload: { input: 'x' } })).json()
    .run
  t.same(own.settings.tools, ['shell', 'read_file'])
  const bad = await app.inject({ method: 'POST', url: `/api/skills/${skill.id}/run`, payload: { tools: ['nope'] } })
  t.equal(bad.statusCode, 400)
})

t.test('task runs and automation prompt targets take the agent options too', async (t) => {
  const app = await buildTestApp(t)
  const task = (await app.inject({ method: 'POST', url: '/api/tasks', payload: { title: 'Write the notes' } })).json()
    .task
  const started = await app.inject({
    method: 'POST',
    url: `/api/tasks/${task.id}/run`,
    payload: { instructions: 'Be brief.', tools: [], maxOutputTokens: 100 }
  })
  t.equal(started.statusCode, 201)
  t.match(started.json().run, {
    prompt: 'Write the notes',
    instructions: 'Be brief.',
    settings: { tools: [], maxOutputTokens: 100 }
  })
  const bad = await app.inject({
    method: 'POST',
    url: '/api/automations',
    payload: { name: 'n', cron: '@daily', target: { prompt: 'p', tools: ['nope'] } }
  })
  t.equal(bad.statusCode, 400)
  t.match(bad.json().message, /^\/body\/target\/tools\/0/)
  const unknown = await app.inject({
    method: 'POST',
    url: '/api/automations',
    payload: {
      name: 'n',
      cron: '@daily',
      target: { prompt: 'p', attachments: ['01900000-0000-7000-8000-000000000000'] }
    }
  })
  t.equal(unknown.statusCode, 404, 'an attachment that is not an upload of the org')
  const file = (await upload(app, { filename: 'report.csv', type: 'text/csv', bytes: 'a,b\n1,2\n' })).json().upload
  const good = await app.inject({
    method: 'POST',
    url: '/api/automations',
    payload: {
      name: 'n',
      cron: '@daily',
      target: { prompt: 'p', instructions: 'Nightly.', temperature: 0, attachments: [file.id] }
    }
  })
  t.equal(good.statusCode, 201)
  const fired = await app.inject({ method: 'POST', url: `/api/automations/${good.json().automation.id}/trigger` })
  t.equal(fired.statusCode, 201)
  t.match(fired.json().run, {
    prompt: 'p',
    instructions: 'Nightly.',
    settings: { temperature: 0 },
    attachments: [file.id]
  })
  const recursive = await app.inject({
    method: 'POST',
    url: '/api/automations',
    payload: { name: 'r', cron: '@daily', target: { prompt: 'p', ...schemaOf({ $ref: '#' }) } }
  })
  t.equal(recursive.statusCode, 400)
  t.match(recursive.json(), { error: 'validation_failed', message: /recursive schemas are not accepted/ })
  // a target saved under earlier rules still fires (a refusal there would stop the scheduler's
  // whole batch); its run fails cleanly where the output is checked, within its bounds
  const saved = (
    await app.inject({
      method: 'POST',
      url: '/api/automations',
      payload: { name: 's', cron: '@daily', target: { prompt: 'p', ...schemaOf({ type: 'object' }) } }
    })
  ).json().automation
  await app.db
    .update(automations)
    .set({ target: { prompt: 'p', ...schemaOf({ $ref: '#' }) } as never })
    .where(eq(automations.id, saved.id))
  const old = await app.inject({ method: 'POST', url: `/api/automations/${saved.id}/trigger` })
  t.equal(old.statusCode, 201)
  t.match(await ended(app, old.json().run.id), {
    status: 'failed',
    error: /^output_invalid: the output could not be checked against the schema/
  })
})

t.test(
  'upstream faults before the first token are retried, honouring Retry-After; after it they are final',
  async (t) => {
    let plan: Array<'429' | '503' | 'ok' | 'cut' | 'drop'> = []
    let calls = 0
    const auth = new Set<string | undefined>()
    const url = await startOpenAiUpstream(t, {
      models: ['tiny-1'],
      onRequest: (req) => void auth.add(req.headers.authorization),
      chat(_body, stream, res) {
        calls++
        const next = plan.shift() ?? 'ok'
        if (next === 'drop') {
          // the connection closes without an answer
          res.socket?.destroy()
          return
        }
        if (next === '429') {
          res
            .writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' })
            .end('{"error":{"message":"slow down"}}')
          return
        }
        if (next === '503') {
          res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"overloaded"}}')
          return
        }
        const chat = stream()
        chat.delta({ content: 'partial' })
        if (next === 'cut') {
          // the answer stops after its first words: no finish_reason, no [DONE]
          res.end()
          return
        }
        chat.end()
      }
    })
    const app = await buildRunsApp(t, { env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1', MODEL_RETRY_BASE_MS: '20' } })
    plan = ['429', '503', 'ok']
    const retried = await ended(app, (await post(app, { prompt: 'try hard' })).json().run.id)
    t.equal(retried.status, 'succeeded')
    t.equal(calls, 3)
    const retries = (await storedEventsOf(app, DEV_ORG.id, retried.id))
      .filter((e) => e.type === 'model.retry')
      .map((e) => e.data)
    t.equal(retries.length, 2)
    t.same(
      retries[0],
      { attempt: 1, status: 429, waitMs: 1000, reason: 'HTTP 429: slow down' },
      'Retry-After is honoured'
    )
    t.match(retries[1], { attempt: 2, status: 503 })
    t.ok(retries[1]!.waitMs >= 10 && retries[1]!.waitMs <= 40, 'exponential backoff with jitter otherwise')
    t.same([...auth], [undefined], 'no key configured: no Authorization header')

    calls = 0
    plan = ['drop', 'ok']
    const dropped = await ended(app, (await post(app, { prompt: 'reconnect' })).json().run.id)
    t.equal(dropped.status, 'succeeded', 'a connection that fails before the answer is tried again')
    t.equal(calls, 2)
    t.match(
      (await storedEventsOf(app, DEV_ORG.id, dropped.id)).filter((e) => e.type === 'model.retry').map((e) => e.data),
      [{ attempt: 1, status: null }]
    )

    calls = 0
    plan = ['cut', 'ok']
    const cut = await ended(app, (await post(app, { prompt: 'cut me' })).json().run.id)
    t.match(
      cut,
      { status: 'failed', error: 'upstream_error: the stream ended early' },
      'a failure after the first token is final'
    )
    t.equal(calls, 1)
    t.same(cut.output, null)

    calls = 0
    plan = ['503', '503', '503', '503', '503']
    const spent = await ended(app, (await post(app, { prompt: 'give up' })).json().run.id)
    t.match(spent, {
      status: 'failed',
      error: /^model_unavailable: .* could not be reached \(tried 4 times\): HTTP 503/
    })
    t.equal(calls, 4, 'MODEL_RETRIES (3) tries after the first')
  }
)

t.test(
  "attachments: the org's uploads are copied into the workspace and listed, small text inlined, in the model's user message",
  async (t) => {
    const requests: any[] = []
    const url = await startOpenAiUpstream(t, {
      models: ['tiny-1'],
      onRequest: (req, body) => {
        if (req.url === '/v1/chat/completions') requests.push(body)
      },
      chat(_body, stream) {
        const chat = stream()
        chat.delta({ content: 'Read them.' })
        chat.end()
      }
    })
    const dataDir = await mkdtemp(join(tmpdir(), 'cairn-attachments-'))
    t.teardown(() => rm(dataDir, { recursive: true, force: true }))
    const app = await buildRunsApp(t, {
      runtime: true,
      routes: [artifactsRoutes],
      env: { OPENAI_BASE_URL: url, MODELS: 'tiny-1', DATA_DIR: dataDir, SANDBOX_UNCONFINED: 'true' }
    })
    const notes = (
      await upload(app, { filename: 'notes.md', type: 'text/markdown', bytes: '# Notes\nuse ``` fences\n' })
    ).json().upload
    const image = (
      await upload(app, {
        filename: 'logo.png',
        type: 'image/png',
        bytes: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2])
      })
    ).json().upload

    // offline: echo answers the prompt "attachments" with what it was given
    const echoed = await ended(
      app,
      (await post(app, { prompt: 'attachments', engine: 'echo', attachments: [notes.id, image.id] })).json().run.id
    )
    t.match(echoed, { status: 'succeeded', attachments: [notes.id, image.id] })
    t.equal(echoed.output, 'attachments: 2 files: attachments/notes.md | attachments/logo.png')

    const run = await ended(
      app,
      (await post(app, { prompt: 'Summarize the notes.', model: 'tiny-1', attachments: [notes.id, image.id] })).json()
        .run.id
    )
    t.equal(run.status, 'succeeded', run.error ?? '')
    const user = requests.at(-1).messages.at(-1)
    t.equal(user.role, 'user')
    t.equal(
      user.content,
      [
        'Summarize the notes.',
        '',
        'Attached files (in your workspace):',
        '- attachments/notes.md (text/markdown, 23 bytes)',
        `- attachments/logo.png (${image.contentType}, 7 bytes)`,
        '',
        'attachments/notes.md:',
        '````',
        '# Notes\nuse ``` fences',
        '````'
      ].join('\n'),
      'listed, and the text file inlined in a fence longer than its own'
    )
    if (app.runtime.sandboxes) {
      const { sandbox, release } = await app.runtime.sandboxes.acquire({ orgId: DEV_ORG.id, threadId: run.rootRunId })
      t.teardown(release)
      t.equal(
        (await sandbox.readFile('attachments/notes.md')).content,
        '# Notes\nuse ``` fences\n',
        "copied into the thread's workspace"
      )
      t.equal((await sandbox.readFile('attachments/logo.png')).size, 7, 'binary files too, byte for byte')
    }

    // refusals: another org's upload and an unknown one are 404, more than 10 a 400; nothing is stored
    const other = await signUpWithOrg(app)
    const foreign = (await upload(app, { filename: 'theirs.txt', bytes: 'secret' }, { cookie: other.cookie })).json()
      .upload
    const before = (await app.db.select().from(runs)).length
    for (const ids of [[foreign.id], ['01900000-0000-7000-8000-000000000000']]) {
      const refused = await post(app, { prompt: 'x', attachments: ids })
      t.equal(refused.statusCode, 404, ids[0])
      t.equal(refused.json().error, 'not_found')
    }
    const tooMany = await post(app, { prompt: 'x', attachments: Array.from({ length: 11 }, (_, i) => `u${i}`) })
    t.equal(tooMany.statusCode, 400)
    t.equal((await app.db.select().from(runs)).length, before, 'no run stored')
  }
)

t.test('an attachment deleted before its run starts fails the run, naming the upload', async (t) => {
  const shared = await createTestDatabase(t)
  const idle = await buildRunsApp(t, {
    db: await secondHandle(t, shared, 5),
    env: { RUN_WORKER_CONCURRENCY: '0' },
    artifacts: true,
    routes: [artifactsRoutes]
  })
  const gone = (await upload(idle, { filename: 'gone.txt', bytes: 'soon gone' })).json().upload
  const queued = (await post(idle, { prompt: 'x', engine: 'echo', attachments: [gone.id] })).json().run
  t.equal((await idle.inject({ method: 'DELETE', url: `/api/uploads/${gone.id}` })).statusCode, 204)
  const worker = await buildRunsApp(t, { db: shared, artifacts: true, routes: [artifactsRoutes] })
  const failed = await ended(worker, queued.id)
  t.match(failed, { status: 'failed', error: `attachment_missing: the upload "${gone.id}" no longer exists` })
})

t.test(
  'a playbook run takes the agent options: every step gets them, the attachments go to the thread with the first',
  async (t) => {
    const app = await buildRunsApp(t, { artifacts: true, routes: [skillsRoutes, artifactsRoutes] })
    const skill = async (name: string, instructions: string) =>
      (
        await app.inject({ method: 'POST', url: '/api/skills', payload: { name, description: 'd', instructions } })
      ).json().skill.id
    const playbook = (
      await app.inject({
        method: 'POST',
        url: '/api/playbooks',
        payload: {
          name: 'Two',
          steps: [
            { skillId: await skill('one', 'Step one.'), input: 'a' },
            { skillId: await skill('two', 'Step two.'), input: 'b' }
          ]
        }
      })
    ).json().playbook
    const file = (await upload(app, { filename: 'brief.txt', bytes: 'the brief' })).json().upload
    const refused = await app.inject({
      method: 'POST',
      url: `/api/playbooks/${playbook.id}/run`,
      payload: { tools: ['no_such_tool'] }
    })
    t.equal(refused.statusCode, 400)
    const started = await app.inject({
      method: 'POST',
      url: `/api/playbooks/${playbook.id}/run`,
      payload: { instructions: 'Be brief.', temperature: 0.3, maxOutputTokens: 50, attachments: [file.id] }
    })
    t.equal(started.statusCode, 201, started.body)
    const first = started.json().run
    const second = await waitFor('the second step', async () =>
      (await runsOfThread(app, first.rootRunId)).find((r) => r.id !== first.id && r.status === 'succeeded')
    )
    const firstRow = (await runsOfThread(app, first.rootRunId)).find((r) => r.id === first.id)!
    t.match(firstRow, {
      instructions: 'Step one.\n\nBe brief.',
      settings: { temperature: 0.3, maxOutputTokens: 50 },
      attachments: [file.id]
    })
    t.match(second, {
      instructions: 'Step two.\n\nBe brief.',
      settings: { temperature: 0.3, maxOutputTokens: 50 },
      attachments: []
    })
  }
)
