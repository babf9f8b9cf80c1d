import { existsSync } from 'node:fs'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { and, eq, sql } from 'drizzle-orm'
import t from 'tap'
import WebSocket from 'ws'
import { FsBlobStore, type BlobStore } from '../../src/artifacts/blob-store.js'
import { rowsOf } from '../../src/db/client.js'
import { threadWorkspaces } from '../../src/runtime/tables.js'
import { createTestDatabase, secondHandle, signUpWithOrg, type Teardown, type TestDatabase } from '../helper.js'
import artifactsRoutes from '../../src/artifacts/index.js'
import { upload } from '../artifacts/helpers.js'
import { buildRunsApp } from '../runs/group.js'
import { storedEventsOf } from '../runs/run-helpers.js'
import { eventually } from '../runs/sse-client.js'
import { shellCall, startToolModel, type ToolModel } from '../runs/tool-model.js'

/**
 * A thread's workspace follows the thread, not the instance: two app instances on one
 * database and one blob store, each with its own disk. What a run or a terminal wrote on
 * one is there for the thread's next run on the other; one instance holds a workspace at
 * a time (a terminal elsewhere is refused with 409, a run waits); a killed holder's lease
 * expires and the next holder gets what was last saved; past SANDBOX_WORKSPACE_MAX_BYTES
 * nothing is saved and the run says so; workspaces of deleted threads are swept.
 */

type App = Awaited<ReturnType<typeof buildRunsApp>>

async function tempDir(t: Teardown, prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  // a shell killed with its instance may still be going away
  t.teardown(() => rm(dir, { recursive: true, force: true, maxRetries: 5 }))
  return dir
}

/** The blob store both instances share (S3 in a deployment), counting the archives read. */
function countingStore(root: string): BlobStore & { reads: number } {
  const inner = new FsBlobStore(root)
  const store = Object.create(inner) as BlobStore & { reads: number }
  store.reads = 0
  store.read = async (orgId, sha256, range) => {
    store.reads++
    return inner.read(orgId, sha256, range)
  }
  return store
}

interface Pair {
  model: ToolModel
  shared: TestDatabase
  store: BlobStore & { reads: number }
  /** a new instance on the shared database and store, with its own disk */
  instance(env?: Record<string, string>): Promise<App>
}

async function pair(t: Teardown): Promise<Pair> {
  const model = await startToolModel(t)
  const shared = await createTestDatabase(t)
  const store = countingStore(await tempDir(t, 'cairn-ws-blobs-'))
  let first = true
  return {
    model,
    shared,
    store,
    async instance(env = {}) {
      const db = first ? shared : await secondHandle(t, shared, 5)
      first = false
      // runs that call tools: the runs group with the runtime (test/runs/group.ts), and uploads
      return buildRunsApp(t, {
        db,
        blobStore: store,
        runtime: true,
        routes: [artifactsRoutes],
        env: {
          OPENAI_BASE_URL: model.url,
          MODELS: 'tool-model',
          RUN_POLL_MS: '50',
          SANDBOX_UNCONFINED: 'true',
          DATA_DIR: await tempDir(t, 'cairn-ws-data-'),
          RUN_WORKER_CONCURRENCY: '1',
          ...env
        }
      })
    }
  }
}

/** The run once it has ended (a guard of a minute on a loaded machine, not a timing threshold). */
const finishedRun = (app: App, cookie: string, id: string) =>
  eventually(async () => {
    const run = (await app.inject({ method: 'GET', url: `/api/runs/${id}?wait=10`, headers: { cookie } })).json().run
    return ['succeeded', 'failed', 'cancelled'].includes(run.status) ? run : null
  }, 60_000)

async function owner(app: App) {
  const signed = await signUpWithOrg(app)
  const auto = await app.inject({
    method: 'PUT',
    url: '/api/tools/policies/shell',
    headers: { cookie: signed.cookie },
    payload: { mode: 'auto' }
  })
  if (auto.statusCode !== 200) throw new Error(`policy: ${auto.statusCode}`)
  return { cookie: signed.cookie, orgId: signed.org.id }
}

async function startRun(app: App, cookie: string, payload: Record<string, unknown>): Promise<string> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie },
    payload: { engine: 'openai', ...payload }
  })
  if (res.statusCode !== 201) throw new Error(`create run: ${res.statusCode} ${res.body}`)
  return res.json().run.id
}

/** The content of the run's one shell result. */
async function shellOutput(app: App, orgId: string, runId: string): Promise<string> {
  const results = (await storedEventsOf(app, orgId, runId)).filter((e) => e.type === 'tool.result')
  return String(results[0]?.data.content ?? '')
}

async function workspaceRow(app: App, orgId: string, threadId: string) {
  const [row] = await app.db
    .select()
    .from(threadWorkspaces)
    .where(and(eq(threadWorkspaces.orgId, orgId), eq(threadWorkspaces.threadId, threadId)))
  return row
}

async function listen(app: App): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return `ws://127.0.0.1:${(app.server.address() as { port: number }).port}`
}

/** A terminal socket: its output as text, its close. */
function terminal(url: string, cookie: string) {
  const ws = new WebSocket(url, { headers: { cookie } })
  let output = ''
  const waiting = new Set<() => void>()
  ws.on('message', (data: Buffer, isBinary) => {
    if (isBinary) output += data.toString('utf8')
    for (const wake of waiting) wake()
  })
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }))
  )
  return {
    ws,
    closed,
    opened: new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve())
      ws.once('error', reject)
    }),
    type: (text: string) => ws.send(Buffer.from(text), { binary: true }),
    /** resolves on the output that matches (each message is an event to check on) */
    until(pattern: RegExp): Promise<void> {
      return new Promise((resolve) => {
        const check = () => {
          if (!pattern.test(output)) return
          waiting.delete(check)
          resolve()
        }
        waiting.add(check)
        check()
      })
    }
  }
}

/** The status, headers and body of a refused handshake. */
function refused(
  url: string,
  cookie: string
): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { cookie } })
    ws.on('open', () => reject(new Error('the upgrade was accepted')))
    ws.on('error', () => {})
    ws.on('unexpected-response', (_req, res) => {
      let body = ''
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString()
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(body) }))
    })
  })
}

t.test(
  "what a run wrote on one instance is what the thread's next run sees on another; one instance reads no archive for its own copy",
  async (t) => {
    const p = await pair(t)
    const a = await p.instance()
    const { cookie, orgId } = await owner(a)
    p.model.script.push(
      shellCall('echo first > notes.txt && mkdir -p src && echo code > src/main.txt && ln -s notes.txt link'),
      { text: 'wrote' }
    )
    const first = await startRun(a, cookie, { prompt: 'write' })
    t.match(await finishedRun(a, cookie, first), { status: 'succeeded', output: 'wrote' })
    const saved = await workspaceRow(a, orgId, first)
    t.match(saved, { revision: 1, holder: null, leaseExpiresAt: null }, 'saved once, free')
    t.ok(saved!.sha256 && saved!.bytes! > 0, 'the archive is a blob of the org')
    const [blob] = rowsOf<{ size: string }>(
      await a.db.execute(sql`select size from blobs where org_id = ${orgId} and sha256 = ${saved!.sha256}`)
    )
    t.equal(Number(blob!.size), saved!.bytes)

    // the same instance again: its copy is that revision, so nothing is restored
    p.model.script.push(shellCall('echo second >> notes.txt'), { text: 'appended' })
    const second = await startRun(a, cookie, { prompt: 'append', rootRunId: first })
    t.match(await finishedRun(a, cookie, second), { status: 'succeeded' })
    t.equal(p.store.reads, 0, 'no archive read on the instance that holds the copy')
    t.equal((await workspaceRow(a, orgId, first))!.revision, 2)

    // a reading run changes nothing: no new revision
    p.model.script.push(shellCall('cat notes.txt'), { text: 'read' })
    const reading = await startRun(a, cookie, { prompt: 'read', rootRunId: first })
    await finishedRun(a, cookie, reading)
    t.equal((await workspaceRow(a, orgId, first))!.revision, 2, 'unchanged files are not saved again')

    // A stops taking runs; B, with an empty disk, takes the next one
    a.runs.worker.kill()
    const b = await p.instance()
    p.model.script.push(shellCall('cat notes.txt src/main.txt link'), { text: 'seen' })
    const third = await startRun(b, cookie, { prompt: 'read', rootRunId: first })
    t.match(await finishedRun(b, cookie, third), { status: 'succeeded' })
    t.match(
      await shellOutput(b, orgId, third),
      /^exit code 0\nfirst\nsecond\ncode\nfirst\nsecond\n$/,
      'files, folders and links came along'
    )
    t.equal(p.store.reads, 1, 'B restored the archive once')
  }
)

t.test(
  "a terminal on another instance is refused with 409 while one holds the workspace; a run there waits, then sees the terminal's files",
  async (t) => {
    const p = await pair(t)
    const a = await p.instance({ RUN_WORKER_CONCURRENCY: '0' })
    const { cookie, orgId } = await owner(a)
    const b = await p.instance()
    p.model.script.push({ text: 'a thread' })
    const root = await startRun(b, cookie, { prompt: 'start' })
    await finishedRun(b, cookie, root)

    const aUrl = await listen(a)
    const bUrl = await listen(b)
    const term = terminal(`${aUrl}/api/runs/${root}/terminal`, cookie)
    await term.opened
    t.match(await workspaceRow(a, orgId, root), { holder: a.runtime.workspaces!.instanceId }, 'A holds the workspace')

    const refusal = await refused(`${bUrl}/api/runs/${root}/terminal`, cookie)
    t.equal(refusal.status, 409)
    t.equal(refusal.headers['retry-after'], '5')
    t.match(refusal.body, { error: 'workspace_busy', message: /in use on another instance/ })
    t.same(Object.keys(refusal.body).sort(), ['error', 'message'])

    // a run of the thread on B waits for the terminal
    p.model.script.push(shellCall('cat from-terminal.txt'), { text: 'after the terminal' })
    const run = await startRun(b, cookie, { prompt: 'read what the terminal wrote', rootRunId: root })
    await eventually(
      async () => (await storedEventsOf(b, orgId, run)).some((e) => e.type === 'workspace.waiting'),
      60_000
    )
    t.equal(
      (await storedEventsOf(b, orgId, run)).filter((e) => e.type === 'tool.result').length,
      0,
      'nothing ran meanwhile'
    )

    term.type('echo typed-on-A > from-terminal.txt && echo done-$((2+3))\r')
    await term.until(/done-5/)
    term.ws.close()
    t.match(await finishedRun(b, cookie, run), { status: 'succeeded', output: 'after the terminal' })
    t.match(await shellOutput(b, orgId, run), /typed-on-A/)

    // and now B holds nothing either: a terminal there opens
    const onB = terminal(`${bUrl}/api/runs/${root}/terminal`, cookie)
    await onB.opened
    onB.type('cat from-terminal.txt\r')
    await onB.until(/typed-on-A/)
    onB.ws.close()
    await onB.closed
  }
)

t.test(
  'a run waiting for the workspace to copy its attachments in is cancelled at once, and the terminal holding it is untouched',
  async (t) => {
    const p = await pair(t)
    const a = await p.instance({ RUN_WORKER_CONCURRENCY: '0' })
    const { cookie, orgId } = await owner(a)
    const b = await p.instance()
    p.model.script.push({ text: 'a thread' })
    const root = await startRun(b, cookie, { prompt: 'start' })
    await finishedRun(b, cookie, root)
    const term = terminal(`${await listen(a)}/api/runs/${root}/terminal`, cookie)
    await term.opened

    const notes = (
      await upload(b, { filename: 'notes.md', type: 'text/markdown', bytes: '# Notes\n' }, { cookie })
    ).json().upload
    const run = await startRun(b, cookie, { prompt: 'read the notes', rootRunId: root, attachments: [notes.id] })
    await eventually(
      async () => (await storedEventsOf(b, orgId, run)).some((e) => e.type === 'workspace.waiting'),
      60_000
    )
    const cancel = await b.inject({ method: 'POST', url: `/api/runs/${run}/cancel`, headers: { cookie } })
    t.equal(cancel.statusCode, 200)
    t.match(await finishedRun(b, cookie, run), { status: 'cancelled' }, 'ended while A still holds the workspace')
    t.match(await workspaceRow(a, orgId, root), { holder: a.runtime.workspaces!.instanceId }, 'A still holds it')
    t.equal(b.runtime.workspaces!.size, 0, 'B took nothing')
    const types = (await storedEventsOf(b, orgId, run)).map((e) => e.type)
    t.notOk(types.includes('tool.started') || types.includes('message.completed'), 'the model was never asked')

    term.type('echo still-here\r')
    await term.until(/still-here/)
    term.ws.close()
    await term.closed
  }
)

t.test(
  "a killed holder's lease expires; the next holder gets what was last saved, not what the dead one had unsaved",
  async (t) => {
    const p = await pair(t)
    const env = { SANDBOX_WORKSPACE_LEASE_MS: '300' }
    const a = await p.instance({ ...env, RUN_WORKER_CONCURRENCY: '0' })
    const { cookie, orgId } = await owner(a)
    const b = await p.instance(env)
    p.model.script.push({ text: 'a thread' })
    const root = await startRun(b, cookie, { prompt: 'start' })
    await finishedRun(b, cookie, root)
    const aUrl = await listen(a)

    const saving = terminal(`${aUrl}/api/runs/${root}/terminal`, cookie)
    await saving.opened
    saving.type('echo kept > state.txt && exit\r')
    t.match(await saving.closed, { code: 1000, reason: 'terminal exited' }, 'the shell ended: saved, then closed')
    t.equal((await workspaceRow(a, orgId, root))!.revision, 1)

    const dying = terminal(`${aUrl}/api/runs/${root}/terminal`, cookie)
    await dying.opened
    dying.type('echo lost > state.txt && echo written\r')
    await dying.until(/written/)
    // A dies: its lease is no longer renewed, nothing is saved or freed
    a.runtime.workspaces!.kill()

    p.model.script.push(shellCall('cat state.txt'), { text: 'read' })
    const run = await startRun(b, cookie, { prompt: 'read', rootRunId: root })
    t.match(await finishedRun(b, cookie, run), { status: 'succeeded' })
    t.match(await shellOutput(b, orgId, run), /^exit code 0\nkept\n$/)
    t.match(await workspaceRow(b, orgId, root), { revision: 1, holder: null })
    dying.ws.close()
    await dying.closed
  }
)

t.test(
  'past SANDBOX_WORKSPACE_MAX_BYTES the run fails with workspace_too_large and the last saved workspace stays the truth',
  async (t) => {
    const p = await pair(t)
    const a = await p.instance({ SANDBOX_WORKSPACE_MAX_BYTES: '4096' })
    const { cookie, orgId } = await owner(a)
    p.model.script.push(shellCall('echo small > small.txt'), { text: 'small' })
    const root = await startRun(a, cookie, { prompt: 'small' })
    t.match(await finishedRun(a, cookie, root), { status: 'succeeded' })

    p.model.script.push(shellCall('head -c 10000 /dev/zero > big.bin && echo more >> small.txt'), { text: 'big' })
    const big = await startRun(a, cookie, { prompt: 'big', rootRunId: root })
    const failed = await finishedRun(a, cookie, big)
    t.match(failed, {
      status: 'failed',
      output: null,
      error:
        /^workspace_too_large: the thread's workspace holds 10\d\d\d bytes, over the limit of 4096 \(SANDBOX_WORKSPACE_MAX_BYTES\); its changes were not saved$/
    })
    const events = await storedEventsOf(a, orgId, big)
    t.match(events.at(-1), { type: 'run.failed', data: { error: /^workspace_too_large/ } })
    t.match(await workspaceRow(a, orgId, root), { revision: 1, holder: null })

    // even on the same instance, the next run starts from the saved workspace
    p.model.script.push(shellCall('ls; cat small.txt'), { text: 'listed' })
    const next = await startRun(a, cookie, { prompt: 'list', rootRunId: root })
    t.match(await finishedRun(a, cookie, next), { status: 'succeeded' })
    t.match(await shellOutput(a, orgId, next), /^exit code 0\nsmall.txt\nsmall\n$/)
  }
)

t.test('the workspace of a deleted thread is swept: its row, its archive and the copies on disk', async (t) => {
  const p = await pair(t)
  const a = await p.instance()
  const { cookie, orgId } = await owner(a)
  p.model.script.push(shellCall('echo doomed > gone.txt'), { text: 'wrote' })
  const root = await startRun(a, cookie, { prompt: 'write' })
  await finishedRun(a, cookie, root)
  p.model.script.push(shellCall('echo kept > kept.txt'), { text: 'wrote' })
  const other = await startRun(a, cookie, { prompt: 'write elsewhere' })
  await finishedRun(a, cookie, other)
  const { sha256 } = (await workspaceRow(a, orgId, root))!
  const copy = join(a.runtime.sandboxes!.provider.workspaceRoot!, orgId, root)
  t.equal(await readFile(join(copy, 'gone.txt'), 'utf8'), 'doomed\n')

  // the thread goes (no route deletes one yet: as an operator or a later feature would)
  await a.db.execute(sql`delete from run_events where org_id = ${orgId} and root_run_id = ${root}`)
  await a.db.execute(sql`delete from runs where org_id = ${orgId} and root_run_id = ${root}`)
  t.same(await a.runtime.workspaces!.sweep(), { rows: 1, copies: 1 })
  t.equal(await workspaceRow(a, orgId, root), undefined)
  t.notOk(existsSync(copy), 'the copy on disk is gone')
  t.ok(await workspaceRow(a, orgId, other), "another thread's workspace stays")

  await a.db.execute(sql`update blobs set pinned_until = now() - interval '1 second' where org_id = ${orgId}`)
  t.ok((await a.artifacts.sweeper.sweep()) >= 1)
  const left = rowsOf<{ sha256: string }>(
    await a.db.execute(sql`select sha256 from blobs where org_id = ${orgId}`)
  ).map((r) => r.sha256)
  t.notOk(left.includes(sha256!), 'the archive nothing names is removed')
  t.ok(left.includes((await workspaceRow(a, orgId, other))!.sha256!), "the other thread's archive is kept")
})
