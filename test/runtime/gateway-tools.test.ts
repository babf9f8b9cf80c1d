import { execFileSync } from 'node:child_process'
import { once } from 'node:events'
import { constants, mkdirSync, openSync } from 'node:fs'
import { Socket } from 'node:net'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newId } from '../../src/db/ids.js'
import type { MemoryTools } from '../../src/runtime/ports.js'
import { toolApprovals } from '../../src/runtime/tables.js'
import { buildTestApp, type EnvOverrides } from '../helper.js'
import { fakeRuns, gatewaySetup } from './fakes.js'

const ORG = DEV_ORG.id

const searched: string[] = []
const SHARED_MEMORY: MemoryTools = {
  async search(run, query, limit) {
    searched.push(`${run.orgId}:${run.rootRunId}:${query}:${limit}`)
    return [{ id: 'm1', content: 'the sky is blue', score: 0.9 }]
  },
  async remember() {
    return { refused: 'not in this test' }
  }
}
const SHARED_ENV: EnvOverrides = { TOOL_OUTPUT_MAX_BYTES: '1024' }

/** Each test gets its own run and thread, on one app for the file unless it asks for its own. */
const setup = gatewaySetup(t, SHARED_ENV, SHARED_MEMORY)

t.test('cancelling the run stops a running command', async (t) => {
  const { app, runId, workspace } = await setup()
  await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
  // the command's first write is the event that it started: it writes into a named pipe the
  // test reads (opened read-write, so the test never reads an end of it before that write)
  mkdirSync(workspace, { recursive: true })
  const fifo = join(workspace, 'started.fifo')
  execFileSync('mkfifo', [fifo])
  const pipe = new Socket({
    fd: openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK),
    readable: true,
    writable: false
  })
  t.teardown(() => pipe.destroy())
  const started = once(pipe, 'data')
  const call = app.runtime.gateway.execute({
    orgId: ORG,
    runId,
    name: 'shell',
    arguments: { command: 'echo started > started.fifo; sleep 60' }
  })
  t.equal(String((await started)[0]).trim(), 'started', 'the command is running')
  await app.runtime.gateway.cancelRun(ORG, runId)
  const result = await call
  t.equal(result.status, 'cancelled')
})

t.test('policy auto runs at once; output is bounded', async (t) => {
  const { app, events, runId } = await setup()
  const set = await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
  t.equal(set.statusCode, 200)
  t.match(set.json(), { tool: 'shell', mode: 'auto', isDefault: false })
  const result = await app.runtime.gateway.execute({
    orgId: ORG,
    runId,
    name: 'shell',
    arguments: { command: 'head -c 100000 /dev/zero | tr "\\0" x' }
  })
  t.equal(result.status, 'ok')
  t.equal(result.approvalId, null)
  t.equal(result.truncated, true)
  t.ok(Buffer.byteLength(result.content) <= 1024, 'the content is within the bound')
  t.match(result.content, /^exit code 0\nxxxx/)
  t.same(
    events.of(runId).map((e) => e.type),
    ['tool.call', 'tool.result'],
    'no approval'
  )
  t.ok(Buffer.byteLength(events.of(runId)[1]!.data.content as string) <= 1024, 'the recorded result is bounded too')
  t.equal((await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))).length, 0)

  const policies = await app.inject({ method: 'GET', url: '/api/tools/policies' })
  t.equal(policies.statusCode, 200)
  const byTool = Object.fromEntries(
    policies
      .json()
      .items.map((p: { tool: string; mode: string; isDefault: boolean }) => [p.tool, [p.mode, p.isDefault]])
  )
  t.same(byTool, {
    shell: ['auto', false],
    read_file: ['auto', true],
    write_file: ['approve', true],
    list_files: ['auto', true],
    memory_search: ['auto', true],
    write_artifact: ['auto', true],
    knowledge_search: ['auto', true],
    propose_knowledge: ['auto', true],
    propose_skill: ['auto', true],
    remember: ['auto', true]
  })
})

t.test('file tools and memory_search run through the gateway', async (t) => {
  const { app, runId, threadId } = await setup()
  await app.inject({ method: 'PUT', url: '/api/tools/policies/write_file', payload: { mode: 'auto' } })
  const gw = app.runtime.gateway
  t.match(
    await gw.execute({ orgId: ORG, runId, name: 'write_file', arguments: { path: 'docs/a.md', content: '# hi' } }),
    { status: 'ok', content: 'wrote 4 bytes to docs/a.md' }
  )
  t.match(await gw.execute({ orgId: ORG, runId, name: 'read_file', arguments: '{"path":"docs/a.md"}' }), {
    status: 'ok',
    content: '# hi'
  })
  const listed = await gw.execute({ orgId: ORG, runId, name: 'list_files', arguments: {} })
  t.same(JSON.parse(listed.content), { entries: [{ name: 'docs', type: 'dir', size: 0 }] })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'read_file', arguments: { path: '../../etc/passwd' } }), {
    status: 'error',
    content: /\.\./
  })
  const found = await gw.execute({ orgId: ORG, runId, name: 'memory_search', arguments: { query: 'sky' } })
  t.same(JSON.parse(found.content), { items: [{ id: 'm1', content: 'the sky is blue', score: 0.9 }] })
  t.same(searched, [`${ORG}:${threadId}:sky:10`])

  // bad calls answer an error result and run nothing
  t.match(await gw.execute({ orgId: ORG, runId, name: 'rm_rf', arguments: {} }), {
    status: 'error',
    content: /unknown tool/
  })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'shell', arguments: '{not json' }), {
    status: 'error',
    content: /not a JSON object/
  })
  t.match(await gw.execute({ orgId: ORG, runId, name: 'shell', arguments: { command: 'true', extra: 1 } }), {
    status: 'error',
    content: /invalid arguments/
  })
  t.match(await gw.execute({ orgId: ORG, runId: newId(), name: 'shell', arguments: { command: 'true' } }), {
    status: 'error',
    content: /run does not exist/
  })
  t.equal(
    (await app.db.select().from(toolApprovals).where(eq(toolApprovals.runId, runId))).length,
    0,
    'no approval was asked for a bad call'
  )

  const defs = gw.definitions()
  t.same(
    defs.map((d) => d.function.name),
    [
      'shell',
      'read_file',
      'write_file',
      'list_files',
      'memory_search',
      'write_artifact',
      'knowledge_search',
      'propose_knowledge',
      'propose_skill',
      'remember'
    ]
  )
  t.match(defs[0], {
    type: 'function',
    function: { parameters: { type: 'object', required: ['command'], additionalProperties: false } }
  })
  t.equal(JSON.stringify(defs).includes('Symbol'), false)
})

// GET /api/config is the system group's: these are whole apps
t.test('/api/config shows the sandbox provider and the gateway capability', async (t) => {
  const none = await buildTestApp(t, { env: { SANDBOX_PROVIDER: 'none' }, runtime: { runs: fakeRuns() } })
  const off = (await none.inject({ method: 'GET', url: '/api/config' })).json()
  t.equal(off.sandbox.provider, 'none')
  t.equal(off.capabilities.toolGateway, false)
  // the default app wires the runs group's ports: the gateway is on with the local provider
  const merged = await buildTestApp(t, { env: { SANDBOX_PROVIDER: 'local', SANDBOX_UNCONFINED: 'true' } })
  const on = (await merged.inject({ method: 'GET', url: '/api/config' })).json()
  t.equal(on.sandbox.provider, 'local')
  t.equal(on.capabilities.toolGateway, true, 'runs wired by default: gateway on')
  const noSandbox = await buildTestApp(t, { env: { SANDBOX_PROVIDER: 'none' } })
  t.equal(
    (await noSandbox.inject({ method: 'GET', url: '/api/config' })).json().capabilities.toolGateway,
    false,
    'no sandbox: no gateway'
  )
})
