import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { createConfig, lintFromString } from '@redocly/openapi-core'
import createClient from 'openapi-fetch'
import openapiTS, { astToString } from 'openapi-typescript'
import t from 'tap'
import ts from 'typescript'
import { buildTestApp } from './helper.js'

/**
 * Contract 1.5 as a client developer meets it: the document passes Redocly's recommended
 * rules, openapi-typescript turns it into types that compile against a typed consumer,
 * and openapi-fetch round-trips real answers through a listening server.
 */

t.test("Redocly's recommended rules find no error and no warning", async (t) => {
  const app = await buildTestApp(t)
  const source = (await app.inject({ method: 'GET', url: '/openapi.json', headers: { host: 'cairn.internal:3000' } })).body
  const config = await createConfig({ extends: ['recommended'] })
  const problems = await lintFromString({ source, absoluteRef: '/openapi.json', config })
  // Contract 8 fixes both `GET /api/knowledge/:id/history` and `GET /api/knowledge/documents/:id`:
  // a URL like /api/knowledge/documents/history fits both templates (the router picks the
  // static segment). The one warning the contract's own paths make is expected, and only it.
  const inherent = (p: (typeof problems)[number]) => p.ruleId === 'no-ambiguous-paths' &&
    p.message.includes('`/api/knowledge/{id}/history` and `/api/knowledge/documents/{id}`')
  t.equal(problems.filter(inherent).length, 1)
  t.same(problems.filter((p) => !inherent(p)).map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? ''}`), [])
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
  const events = await client.GET('/api/runs/{id}/events', { params: { path: { id: 'r' } }, parseAs: 'stream' })
  const body: ReadableStream | null | undefined = events.data
  const payload: Schemas['RunEvent'] | null = null
  void [run, status, error, items, item, capture, frame, key, user, organization, detail, body, payload]
}
`

t.test('openapi-typescript generates types that a typed consumer compiles against', async (t) => {
  const app = await buildTestApp(t)
  const document = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
  const types = astToString(await openapiTS(document))
  // inside node_modules/.cache so the consumer resolves openapi-fetch like project code does
  const dir = mkdtempSync(join(resolve('node_modules'), '.cache-openapi-client-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(join(dir, 'api.ts'), types)
  writeFileSync(join(dir, 'consumer.ts'), CONSUMER)
  const program = ts.createProgram([join(dir, 'consumer.ts')], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
    types: []
  })
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))
  t.same(diagnostics, [], 'the generated client compiles')
  for (const name of ['Run', 'Thread', 'RunEvent', 'MemoryItem', 'Capture', 'RecallFrame', 'User', 'Organization', 'ApiKey', 'ErrorBody']) {
    t.match(types, new RegExp(`\\b${name}: \\{`), `${name} is a named type`)
  }
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

t.test('openapi-fetch round-trips real answers: sign-up, org, key, run, its event stream, memory search', async (t) => {
  const app = await buildTestApp(t)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  // the document is the one served; the client is untyped here (the typed check is above)
  const client = createClient<Record<string, never>>({ baseUrl: `http://127.0.0.1:${address.port}` }) as unknown as ReturnType<typeof createClient>
  const anyClient = client as unknown as {
    POST: (path: string, init: Record<string, unknown>) => Promise<{ data?: any; error?: any; response: Response }>
    GET: (path: string, init: Record<string, unknown>) => Promise<{ data?: any; error?: any; response: Response }>
  }

  const signUp = await anyClient.POST('/api/auth/sign-up', { body: { email: 'client@example.test', password: 'a long password', name: 'Client' } })
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

  const events = await anyClient.GET('/api/runs/{id}/events', { params: { path: { id: run.id } }, parseAs: 'stream', headers: { authorization } })
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

  const searched = await anyClient.GET('/api/memory/search', { params: { query: { q: 'client' } }, headers: { authorization } })
  t.equal(searched.response.status, 200)
  t.equal(searched.data.enabled, true)
  t.ok(Array.isArray(searched.data.items))

  const missing = await anyClient.GET('/api/runs/{id}', { params: { path: { id: 'no-such-run' } }, headers: { authorization } })
  t.equal(missing.response.status, 404)
  t.equal(missing.error.error, 'not_found')
})
