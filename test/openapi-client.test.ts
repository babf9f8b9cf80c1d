import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { lintFromString, loadConfig } from '@redocly/openapi-core'
import createClient from 'openapi-fetch'
import openapiTS, { astToString } from 'openapi-typescript'
import t from 'tap'
import { embeddedOnly } from './passes.js'
import ts from 'typescript'
import { buildTestApp, type Teardown } from './helper.js'

/**
 * The OpenAPI document as a client developer meets it: the document passes Redocly's recommended
 * rules, openapi-typescript turns it into types that compile against a typed consumer,
 * and openapi-fetch round-trips real answers through a listening server.
 */

t.test("Redocly's recommended rules find no error and no warning", embeddedOnly, async (t) => {
  const app = await buildTestApp(t)
  const source = (await app.inject({ method: 'GET', url: '/openapi.json', headers: { host: 'cairn.internal:3000' } }))
    .body
  // the repository's configuration, as `npx @redocly/cli lint openapi.json` at its root reads it
  const config = await loadConfig({ configPath: resolve('redocly.yaml') })
  const problems = await lintFromString({ source, absoluteRef: resolve('openapi.json'), config })
  // nothing ignored either: the one ambiguous pair of paths the API keeps on purpose is allowed, with why, in
  // redocly.yaml (the rule cairn/no-ambiguous-paths, scripts/redocly-rules.mjs), so any other pair still warns
  t.same(
    problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? ''}`),
    []
  )
  // the rule in place of Redocly's own finds another pair
  const withAnother = JSON.parse(source) as { paths: Record<string, unknown> }
  withAnother.paths['/api/knowledge/{id}/versions'] = withAnother.paths['/api/knowledge/{id}/history']
  withAnother.paths['/api/knowledge/drafts/{id}'] = withAnother.paths['/api/knowledge/documents/{id}']
  const another = await lintFromString({
    source: JSON.stringify(withAnother),
    absoluteRef: resolve('openapi.json'),
    config
  })
  // each ambiguous pair, whatever order the document lists its paths in
  const pairs = (messages: string[]) =>
    messages
      .map((m) =>
        [...m.matchAll(/`([^`]+)`/g)]
          .map((found) => found[1])
          .sort()
          .join(' and ')
      )
      .sort()
  t.same(
    pairs(another.filter((p) => p.ruleId.endsWith('no-ambiguous-paths')).map((p) => p.message)),
    pairs([
      'Paths should resolve unambiguously. Found two ambiguous paths: `/api/knowledge/{id}/history` and `/api/knowledge/drafts/{id}`.',
      'Paths should resolve unambiguously. Found two ambiguous paths: `/api/knowledge/documents/{id}` and `/api/knowledge/{id}/versions`.',
      'Paths should resolve unambiguously. Found two ambiguous paths: `/api/knowledge/{id}/versions` and `/api/knowledge/drafts/{id}`.'
    ])
  )
})

/** A consumer of the generated types: it compiles only if the document names what clients use. */
const CONSUMER = `
import createClient from 'openapi-fetch'
import type { components, paths } from './api.js'

type Schemas = components['schemas']
const client = createClient<paths>({ baseUrl: 'http://localhost:3000' })

export async function use(): Promise<void> {
  const created = await client.POST('/api/runs', {
    params: { header: { 'idempotency-key': 'k1' } },
    body: { prompt: 'hello', metadata: { a: 1 } }
  })
  const run: Schemas['Run'] | undefined = created.data?.run
  const status: Schemas['RunStatus'] | undefined = run?.status
  const error: Schemas['ErrorBody'] | undefined = created.error
  const search = await client.GET('/api/memory/search', { params: { query: { q: 'x', scope: 'org' } } })
  const items: Schemas['MemorySearchItem'][] | undefined = search.data?.items
  const page = await client.GET('/api/memory/browse', {})
  const item: Schemas['MemoryItem'] | undefined = page.data?.items[0]
  const captures = await client.GET('/api/memory/captures', {})
  const capture: Schemas['Capture'] | undefined = captures.data?.captures[0]
  const recalls = await client.GET('/api/memory/recalls', {})
  const frame: Schemas['RecallFrame'] | undefined = recalls.data?.recalls[0]
  const keys = await client.GET('/api/keys')
  const key: Schemas['ApiKey'] | undefined = keys.data?.items[0]
  const session = await client.GET('/api/auth/session')
  const user: Schemas['User'] | undefined = session.data?.user
  const org = await client.POST('/api/auth/organizations', { body: { name: 'x' } })
  const organization: Schemas['Organization'] | undefined = org.data?.organization
  const thread = await client.GET('/api/threads/{rootRunId}', { params: { path: { rootRunId: 'r' } } })
  const detail: Schemas['Thread'] | undefined = thread.data?.thread
  // an upload's file is a Blob (format: binary), sent as multipart
  const upload = await client.POST('/api/uploads', {
    body: { file: new Blob(['hello'], { type: 'text/plain' }) },
    bodySerializer: (body) => {
      const form = new FormData()
      form.append('file', body.file, 'hello.txt')
      return form
    }
  })
  const uploaded: Schemas['Upload'] | undefined = upload.data?.upload
  void [run, status, error, items, item, capture, frame, key, user, organization, detail, uploaded]
}

/** The payload of one frame of each stream, as the generated types name it. */
type Payload<P extends keyof paths, M extends 'get' | 'post'> = paths[P][M] extends { responses: { 200: { content: { 'text/event-stream': infer T } } } } ? T : never
export type RunStreamPayload = Payload<'/api/runs/{id}/events', 'get'>
export type ThreadStreamPayload = Payload<'/api/runs/{rootRunId}/thread-events', 'get'>
export type ChangePayload = Payload<'/api/runs/changes', 'get'>
export type ChatPayload = Payload<'/api/chat', 'post'>
const runPayload: RunStreamPayload extends Schemas['RunEvent'] | Schemas['RunStreamEnd'] ? true : false = true
const threadPayload: ThreadStreamPayload extends Schemas['RunEvent'] ? true : false = true
const changePayload: ChangePayload extends Schemas['RunChange'] ? true : false = true
const chatPayload: ChatPayload extends Schemas['ChatToken'] | Schemas['ChatDone'] | Schemas['ChatEnd'] | Schemas['ErrorBody'] ? true : false = true
void [runPayload, threadPayload, changePayload, chatPayload]

/** Starts a run and follows its events to the end, typed by the generated client alone. */
export async function followRun(baseUrl: string, authorization: string, prompt: string): Promise<{ run: Schemas['Run']; events: Schemas['RunEvent'][]; end: Schemas['RunStreamEnd'] | null }> {
  const api = createClient<paths>({ baseUrl, headers: { authorization } })
  const created = await api.POST('/api/runs', { params: { header: { 'idempotency-key': 'follow-' + prompt.length } }, body: { prompt } })
  if (!created.data) throw new Error('no run: ' + JSON.stringify(created.error))
  const run = created.data.run
  const stream = await api.GET('/api/runs/{id}/events', { params: { path: { id: run.id } }, parseAs: 'stream' })
  if (!stream.data) throw new Error('no stream: ' + stream.response.status)
  const events: Schemas['RunEvent'][] = []
  let end: Schemas['RunStreamEnd'] | null = null
  const reader = stream.data.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ''
  while (end === null) {
    const { value, done } = await reader.read()
    if (done) break
    buffer += value
    let cut: number
    while ((cut = buffer.indexOf('\\n\\n')) >= 0) {
      const block = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      const data = /^data: (.*)$/m.exec(block)?.[1]
      if (data === undefined) continue
      const payload = JSON.parse(data) as RunStreamPayload
      // a RunEvent has a type (its frame's event name); the end frame's payload has a status
      if ('type' in payload) events.push(payload)
      else end = payload
    }
  }
  await reader.cancel()
  return { run, events, end }
}
`

/** openapi-typescript's types for the served document, with binary strings as Blob (its documented option). */
async function generatedTypes(document: Parameters<typeof openapiTS>[0]): Promise<string> {
  return astToString(
    await openapiTS(document, {
      transform: (schema) => (schema.format === 'binary' ? ts.factory.createTypeReferenceNode('Blob') : undefined)
    })
  )
}

/** Writes the generated types and the consumer where the consumer resolves openapi-fetch like project code does. */
function writeClient(t: Teardown, types: string): string {
  const dir = mkdtempSync(join(resolve('node_modules'), '.cache-openapi-client-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(join(dir, 'api.ts'), types)
  writeFileSync(join(dir, 'consumer.ts'), CONSUMER)
  return dir
}

t.test('openapi-typescript generates types that a typed consumer compiles against', embeddedOnly, async (t) => {
  const app = await buildTestApp(t)
  const document = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
  const types = await generatedTypes(document)
  const dir = writeClient(t, types)
  const program = ts.createProgram([join(dir, 'consumer.ts')], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts', 'lib.dom.asynciterable.d.ts'],
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
    types: []
  })
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))
  t.same(diagnostics, [], 'the generated client compiles')
  for (const name of [
    'Run',
    'Thread',
    'RunEvent',
    'RunStreamEnd',
    'MemoryItem',
    'Capture',
    'RecallFrame',
    'User',
    'Organization',
    'ApiKey',
    'ErrorBody'
  ]) {
    t.match(types, new RegExp(`\\b${name}: \\{`), `${name} is a named type`)
  }
  t.match(
    types,
    /RunStreamEvent: components\["schemas"\]\["RunEvent"\] \| components\["schemas"\]\["RunStreamEnd"\];/,
    "a run stream's frames are typed"
  )
  t.match(
    types,
    /ChatStreamEvent: components\["schemas"\]\["ChatToken"\] \| components\["schemas"\]\["ChatDone"\] \| components\["schemas"\]\["ChatEnd"\] \| components\["schemas"\]\["ErrorBody"\];/,
    "a chat's frames are typed"
  )
  t.match(types, /UploadRequest: \{[^}]*file: Blob;/, "an upload's file is a Blob")
})

/** Reads an event stream until `event: end`, returning the frames' event names and data. */
async function readFrames(stream: ReadableStream<Uint8Array>): Promise<Array<{ event: string; data: unknown }>> {
  const frames: Array<{ event: string; data: unknown }> = []
  const decoder = new TextDecoder()
  let buffer = ''
  const reader = stream.getReader()
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    buffer += decoder.decode(value, { stream: true })
    let cut: number
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut)
      buffer = buffer.slice(cut + 2)
      const event = /^event: (.*)$/m.exec(block)?.[1]
      const data = /^data: (.*)$/m.exec(block)?.[1]
      if (event !== undefined) frames.push({ event, data: data === undefined ? null : JSON.parse(data) })
      if (event === 'end') {
        await reader.cancel()
        return frames
      }
    }
  }
  return frames
}

t.test(
  'openapi-fetch round-trips real answers: sign-up, org, key, run, its event stream, memory search',
  embeddedOnly,
  async (t) => {
    const app = await buildTestApp(t)
    await app.listen({ port: 0, host: '127.0.0.1' })
    const address = app.server.address()
    if (address === null || typeof address === 'string') throw new Error('no port')
    // the document is the one served; the client is untyped here (the typed check is above)
    const client = createClient<Record<string, never>>({
      baseUrl: `http://127.0.0.1:${address.port}`
    }) as unknown as ReturnType<typeof createClient>
    const anyClient = client as unknown as {
      POST: (path: string, init: Record<string, unknown>) => Promise<{ data?: any; error?: any; response: Response }>
      GET: (path: string, init: Record<string, unknown>) => Promise<{ data?: any; error?: any; response: Response }>
    }

    const signUp = await anyClient.POST('/api/auth/sign-up', {
      body: { email: 'client@example.test', password: 'a long password', name: 'Client' }
    })
    t.equal(signUp.response.status, 201)
    t.equal(signUp.data.user.email, 'client@example.test')
    const cookie = (signUp.response.headers.get('set-cookie') ?? '').split(';')[0]!
    t.match(cookie, /^cairn_session=/)

    const org = await anyClient.POST('/api/auth/organizations', { body: { name: 'Client Org' }, headers: { cookie } })
    t.equal(org.response.status, 201)
    t.equal(org.data.organization.role, 'owner')

    const minted = await anyClient.POST('/api/keys', { body: { name: 'generated client' }, headers: { cookie } })
    t.equal(minted.response.status, 201)
    const authorization = `Bearer ${minted.data.key as string}`

    const created = await anyClient.POST('/api/runs', {
      body: { prompt: 'Please remember that the client was generated.' },
      headers: { authorization, 'idempotency-key': 'generated-client-1' }
    })
    t.equal(created.response.status, 201)
    const run = created.data.run
    t.equal(run.status, 'queued')
    t.equal(run.origin, 'api')

    const replay = await anyClient.POST('/api/runs', {
      body: { prompt: 'Please remember that the client was generated.' },
      headers: { authorization, 'idempotency-key': 'generated-client-1' }
    })
    t.equal(replay.response.headers.get('idempotent-replayed'), 'true')
    t.equal(replay.data.run.id, run.id)

    const events = await anyClient.GET('/api/runs/{id}/events', {
      params: { path: { id: run.id } },
      parseAs: 'stream',
      headers: { authorization }
    })
    t.equal(events.response.status, 200)
    t.match(events.response.headers.get('content-type'), /^text\/event-stream/)
    const frames = await readFrames(events.data as ReadableStream<Uint8Array>)
    const types = frames.map((f) => f.event)
    t.equal(types[0], 'run.queued')
    t.ok(types.includes('run.succeeded'), `the run succeeded: ${types.join(', ')}`)
    t.equal(types.at(-1), 'end')
    const first = frames[0]!.data as { id: number; runId: string; type: string }
    t.equal(first.runId, run.id)
    t.equal(first.type, 'run.queued')

    // the typed consumer, compiled as it was type-checked above, follows a run of its own
    const document = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
    const dir = writeClient(t, await generatedTypes(document))
    const compiled = ts.transpileModule(CONSUMER, {
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext }
    }).outputText
    writeFileSync(join(dir, 'consumer.mjs'), compiled)
    const consumer = (await import(pathToFileURL(join(dir, 'consumer.mjs')).href)) as {
      followRun(
        baseUrl: string,
        authorization: string,
        prompt: string
      ): Promise<{
        run: { id: string }
        events: Array<{ runId: string; type: string }>
        end: { runId: string; status: string } | null
      }>
    }
    const followed = await consumer.followRun(
      `http://127.0.0.1:${address.port}`,
      authorization,
      'Followed by the generated client.'
    )
    const followedTypes = followed.events.map((e) => e.type)
    t.equal(followedTypes[0], 'run.queued', 'the typed follower reads RunEvents')
    t.ok(followedTypes.includes('run.succeeded'), `the followed run succeeded: ${followedTypes.join(', ')}`)
    t.ok(
      followed.events.every((e) => e.runId === followed.run.id),
      'every RunEvent is of the followed run'
    )
    t.same(followed.end, { runId: followed.run.id, status: 'succeeded' }, 'the end frame is a RunStreamEnd')

    const searched = await anyClient.GET('/api/memory/search', {
      params: { query: { q: 'client' } },
      headers: { authorization }
    })
    t.equal(searched.response.status, 200)
    t.equal(searched.data.enabled, true)
    t.ok(Array.isArray(searched.data.items))

    const missing = await anyClient.GET('/api/runs/{id}', {
      params: { path: { id: 'no-such-run' } },
      headers: { authorization }
    })
    t.equal(missing.response.status, 404)
    t.equal(missing.error.error, 'not_found')
  }
)
