import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { createTestDatabase, waitFor } from '../helper.js'
import { startServer, type Started } from '../server-process.js'
import { SseClient } from './sse-client.js'
import { shellCall, startToolModel } from './tool-model.js'

/**
 * A tool call interrupted by a restart, on real server processes: a shell call is running
 * when its server gets SIGTERM; the run is handed back and the next server goes on with it.
 * The call is never run again on its own: the model is told it was interrupted and may have
 * partly run (`tool.result` with status `interrupted`), and a call a person had approved waits
 * for a new decision. The embedded database allows one process, so each server starts after
 * the one before it exited (on Postgres too, so the hand-back is what is tested).
 */

const INTERRUPTED = 'the call was interrupted by a restart and may have partly run'

interface RunEvent {
  type: string
  data: Record<string, any>
}

t.test(
  'a call running at SIGTERM is answered as interrupted where the run goes on; an approved one is asked again',
  async (t) => {
    const { url } = await createTestDatabase(t)
    const model = await startToolModel(t)
    const dataDir = mkdtempSync(join(tmpdir(), 'cairn-interrupted-'))
    // where the shell calls leave their marks, outside every workspace
    const marks = mkdtempSync(join(tmpdir(), 'cairn-interrupted-marks-'))
    const servers: Started[] = []
    t.teardown(() => {
      for (const s of servers) s.kill('SIGKILL')
      // a shell that outlived its server stops waiting
      for (const name of ['a', 'b']) writeFileSync(join(marks, `${name}.release`), '')
      rmSync(dataDir, { recursive: true, force: true })
      rmSync(marks, { recursive: true, force: true })
    })
    const env = {
      DATA_DIR: dataDir,
      ...(url ? { DATABASE_URL: url } : {}),
      RUN_POLL_MS: '100',
      SHUTDOWN_GRACE_MS: '10000',
      OPENAI_BASE_URL: model.url,
      MODELS: 'tool-model',
      // plain processes: the marks are outside the workspace, where a test can read them
      SANDBOX_CONFINEMENT: 'none',
      SANDBOX_UNCONFINED: 'true'
    }
    const start = async () => {
      const server = await startServer(env)
      servers.push(server)
      return server
    }
    const stop = async (server: Started) => {
      t.ok(server.kill('SIGTERM'))
      t.equal(await server.exit, 0, 'the server exits 0')
    }
    /** a shell command that marks its start, waits until released, then marks its end */
    const blocking = (name: string) => {
      const log = join(marks, `${name}.log`)
      const release = join(marks, `${name}.release`)
      return `echo start >> ${log}; while [ ! -f ${release} ]; do sleep 0.05; done; echo end >> ${log}`
    }
    const marksOf = (name: string) => {
      try {
        return readFileSync(join(marks, `${name}.log`), 'utf8')
          .split('\n')
          .filter(Boolean)
      } catch {
        return []
      }
    }
    const api = async (server: Started, method: string, path: string, body?: unknown) => {
      const res = await fetch(`${server.url}/api${path}`, {
        method,
        ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
      })
      return { status: res.status, body: (await res.json()) as any }
    }
    const runOf = async (server: Started, id: string) => (await api(server, 'GET', `/runs/${id}`)).body.run
    /** the run's events, once `until` holds of them (by default: once the run has ended) */
    const eventsOf = async (
      server: Started,
      id: string,
      until: (events: RunEvent[]) => boolean = () => false
    ): Promise<RunEvent[]> => {
      const stream = await SseClient.open(`${server.url}/api/runs/${id}/events`)
      const events = () =>
        stream
          .events()
          .filter((f) => f.event !== 'end')
          .map((f) => stream.json(f) as RunEvent)
      try {
        await stream.until((c) => c.ended || until(events()), 60_000)
        return events()
      } finally {
        stream.close()
      }
    }

    // ---- a call that needs no decision -------------------------------------------------------
    let server = await start()
    t.equal((await api(server, 'PUT', '/tools/policies/shell', { mode: 'auto' })).status, 200)
    model.script.push(shellCall(blocking('a'), 'call_a'), { text: 'It was interrupted; I will not retry blindly.' })
    const created = await api(server, 'POST', '/runs', { prompt: 'run the slow command', engine: 'openai' })
    t.equal(created.status, 201)
    const first = created.body.run.id as string
    await waitFor('the command started', async () => marksOf('a').length === 1, 60_000)
    await stop(server)
    t.same(marksOf('a'), ['start'], 'stopped mid-command')
    server = await start()

    const done = await waitFor(
      'the run ended',
      async () => {
        const run = await runOf(server, first)
        return ['succeeded', 'failed', 'cancelled'].includes(run.status) && run
      },
      60_000
    )
    t.equal(done.status, 'succeeded', done.error ?? '')
    t.equal(done.output, 'It was interrupted; I will not retry blindly.')
    t.same(marksOf('a'), ['start'], 'the command ran once: never started again')
    t.equal(model.requests.length, 2, 'the round that asked for the call is not asked again')
    t.same(model.requests[1]!.body.messages.slice(-2), [
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_a',
            type: 'function',
            function: { name: 'shell', arguments: JSON.stringify({ command: blocking('a') }) }
          }
        ]
      },
      { role: 'tool', tool_call_id: 'call_a', content: INTERRUPTED }
    ])
    const events = await eventsOf(server, first)
    const results = events.filter((e) => e.type === 'tool.result')
    t.same(
      results.map((e) => [e.data.callId, e.data.status, e.data.content]),
      [['call_a', 'interrupted', INTERRUPTED]],
      'one tool.result, interrupted (no cancelled one from the stopping server)'
    )
    t.equal(events.filter((e) => e.type === 'tool.call').length, 1, 'the call was made once')
    t.same(
      events.filter((e) => e.type.startsWith('run.')).map((e) => e.type),
      ['run.queued', 'run.started', 'run.queued', 'run.started', 'run.succeeded'],
      'handed back once, never failed'
    )
    const transcript = (await api(server, 'GET', `/runs/${first}/messages`)).body.items
    t.match(transcript, [
      { role: 'user', content: 'run the slow command' },
      { role: 'assistant', toolCalls: [{ id: 'call_a', name: 'shell' }] },
      { role: 'tool', toolCallId: 'call_a', name: 'shell', content: INTERRUPTED },
      { role: 'assistant', content: 'It was interrupted; I will not retry blindly.' }
    ])
    t.equal(transcript.length, 4, 'the tool pair is whole, nothing twice')

    // ---- a call a person approved ------------------------------------------------------------
    t.equal((await api(server, 'PUT', '/tools/policies/shell', { mode: 'approve' })).status, 200)
    model.script.push(shellCall(blocking('b'), 'call_b'), { text: 'Ran it after the second approval.' })
    const second = (await api(server, 'POST', '/runs', { prompt: 'run it once approved', engine: 'openai' })).body.run
      .id as string
    const asked = await waitFor(
      'the approval is asked',
      async () => (await api(server, 'GET', `/runs/${second}/approvals`)).body.items[0],
      60_000
    )
    t.equal((await api(server, 'POST', `/runs/${second}/approvals/${asked.id}`, { decision: 'approve' })).status, 200)
    await waitFor('the approved command started', async () => marksOf('b').length === 1, 60_000)
    await stop(server)
    server = await start()

    const again = await waitFor(
      'a new approval is asked',
      async () => {
        const items = (await api(server, 'GET', `/runs/${second}/approvals`)).body.items
        return items.length === 2 && items
      },
      60_000
    )
    t.match(again, [
      { id: asked.id, status: 'approved', callId: 'call_b', tool: 'shell' },
      { status: 'pending', callId: 'call_b', tool: 'shell', arguments: { command: blocking('b') } }
    ])
    t.not(again[1].id, asked.id, 'the old approval does not let it run again')
    const waiting = await waitFor(
      'the run waits for the decision',
      async () => {
        const run = await runOf(server, second)
        return run.status === 'requires_action' && run
      },
      60_000
    )
    t.equal(waiting.status, 'requires_action')
    t.same(marksOf('b'), ['start'], 'not run again without a decision')
    const beforeDecision = await eventsOf(
      server,
      second,
      (events) => events.filter((e) => e.type === 'run.requires_action').length === 2
    )
    t.match(beforeDecision.filter((e) => e.type === 'approval.requested').at(-1)!.data, {
      approvalId: again[1].id,
      callId: 'call_b',
      interrupted: true,
      previousApprovalId: asked.id
    })
    t.same(
      beforeDecision.filter((e) => e.type === 'run.requires_action').map((e) => e.data.approvalIds),
      [[asked.id], [again[1].id]]
    )
    t.notOk(
      beforeDecision.some((e) => e.type === 'tool.result'),
      'no result yet: the call waits for a person'
    )

    // approved again, it runs again (the person knows it may have partly run) and the run goes on
    writeFileSync(join(marks, 'b.release'), '')
    t.equal(
      (await api(server, 'POST', `/runs/${second}/approvals/${again[1].id}`, { decision: 'approve' })).status,
      200
    )
    const ended = await waitFor(
      'the second run ended',
      async () => {
        const run = await runOf(server, second)
        return ['succeeded', 'failed', 'cancelled'].includes(run.status) && run
      },
      60_000
    )
    t.equal(ended.status, 'succeeded', ended.error ?? '')
    t.same(marksOf('b'), ['start', 'start', 'end'], 'run twice: once per decision')
    const results2 = (await eventsOf(server, second)).filter((e) => e.type === 'tool.result')
    t.match(
      results2.map((e) => e.data),
      [{ callId: 'call_b', status: 'ok', approvalId: again[1].id }]
    )
    t.match(model.requests.at(-1)!.body.messages.at(-1), {
      role: 'tool',
      tool_call_id: 'call_b',
      content: /exit code 0/
    })
    await stop(server)
  }
)
