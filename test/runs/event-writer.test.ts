import t from 'tap'
import { asc, eq } from 'drizzle-orm'
import { RunEventWriter } from '../../src/runs/event-writer.js'
import type { NewEvent } from '../../src/runs/events.js'
import { runEvents } from '../../src/runs/tables.js'
import { buildRunsApp } from './group.js'
import { finishedRun } from './run-helpers.js'

const event = (type: string, text?: string): NewEvent => ({
  orgId: 'o',
  runId: 'r',
  rootRunId: 'r',
  type,
  data: text === undefined ? {} : { text }
})

/** A write the test lets finish when it wants: what each write carried, in order. */
function gatedWrites() {
  const writes: string[][] = []
  const gates: Array<(err?: unknown) => void> = []
  const write = (events: NewEvent[]) =>
    new Promise<void>((resolve, reject) => {
      writes.push(events.map((e) => `${e.type}${e.data?.text ? `:${String(e.data.text)}` : ''}`))
      gates.push((err) => (err ? reject(err) : resolve()))
    })
  const open = async (err?: unknown) => {
    gates.shift()!(err)
    // the writer's continuation runs on the settled promise
    await new Promise((resolve) => setImmediate(resolve))
  }
  return { writes, write, open }
}

/** One turn of the event loop: a write of deltas asked for starts then. */
const turn = () => new Promise((resolve) => setImmediate(resolve))

t.test('deltas do not wait for their write; what comes meanwhile is the next write, in order', async (t) => {
  const g = gatedWrites()
  const writer = new RunEventWriter(g.write)
  await writer.emit(event('message.delta', 'a'))
  t.same(g.writes, [], 'the write starts once the event loop turns')
  await turn()
  await writer.emit(event('message.delta', 'b'))
  await writer.emit(event('message.delta', 'c'))
  t.same(g.writes, [['message.delta:a']], 'one write in flight; the others wait for it')
  let called = false
  const tool = writer.emit(event('tool.call')).then(() => (called = true))
  await g.open()
  t.same(
    g.writes,
    [['message.delta:a'], ['message.delta:b', 'message.delta:c', 'tool.call']],
    'the waiting events go as one write'
  )
  t.equal(called, false, 'an event that is not a delta waits until it is stored')
  await g.open()
  await tool
  t.equal(called, true)
})

t.test("message.completed waits for the run's next write, or its end", async (t) => {
  const g = gatedWrites()
  const writer = new RunEventWriter(g.write)
  await writer.emit(event('message.delta', 'a'))
  await turn()
  await writer.emit(event('message.completed', 'a'))
  t.same(g.writes, [['message.delta:a']])
  await g.open()
  t.same(g.writes, [['message.delta:a']], 'a deferred event alone does not cost a write')
  t.same(
    (await writer.take()).map((e) => e.type),
    ['message.completed'],
    'handed to the write that ends the run'
  )
  t.same(await writer.take(), [], 'and nothing is left')

  const h = gatedWrites()
  const next = new RunEventWriter(h.write)
  await next.emit(event('message.completed', 'x'))
  const flushed = next.flush()
  await new Promise((resolve) => setImmediate(resolve))
  t.same(h.writes, [['message.completed:x']], 'flush writes the deferred ones too (before a call that takes time)')
  await h.open()
  await flushed
})

t.test('an engine that answers at once: everything it emitted goes with its end (hold, then take)', async (t) => {
  const g = gatedWrites()
  const writer = new RunEventWriter(g.write)
  await writer.emit(event('memory.recalled'))
  await writer.emit(event('message.delta', 'a'))
  await writer.emit(event('message.delta', 'b'))
  await writer.emit(event('message.completed', 'ab'))
  writer.hold()
  await turn()
  t.same(g.writes, [], 'no write of its own')
  t.same(
    (await writer.take()).map((e) => e.type),
    ['memory.recalled', 'message.delta', 'message.delta', 'message.completed'],
    'in order, for the statement that ends the run'
  )
})

t.test('a failed write fails the next wait, and nothing after it is handed on', async (t) => {
  const g = gatedWrites()
  const writer = new RunEventWriter(g.write)
  await writer.emit(event('message.delta', 'a'))
  await turn()
  await writer.emit(event('message.delta', 'b'))
  await g.open(new Error('the database is away'))
  await t.rejects(writer.emit(event('tool.call')), /the database is away/)
  await t.rejects(writer.settled(), /the database is away/)
  t.same(await writer.take(), [], 'no gap in the stream: what followed the failed write is dropped')
  t.same(g.writes, [['message.delta:a']])
})

t.test('an echo run: its events in order, the answer and the end stored in one statement', async (t) => {
  const app = await buildRunsApp(t)
  const prompt = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ')
  const run = (await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt } })).json().run
  const done = await finishedRun(app, '', run.id)
  t.equal(done.status, 'succeeded')
  t.equal(done.output, prompt)
  const events = await app.db.select().from(runEvents).where(eq(runEvents.runId, run.id)).orderBy(asc(runEvents.id))
  const types = events.map((e) => e.type)
  t.same(
    types.filter((type) => type !== 'message.delta'),
    ['run.queued', 'run.started', 'memory.recalled', 'message.completed', 'run.succeeded']
  )
  t.equal(types.indexOf('message.completed'), types.length - 2, 'every delta before the answer')
  const text = events
    .filter((e) => e.type === 'message.delta')
    .map((e) => (e.data as { text: string }).text)
    .join('')
  t.equal(text.replace(/\s+/g, ' ').trim(), prompt, 'the deltas, in id order, are the answer')
  const [completed, succeeded] = events.slice(-2)
  t.equal(completed!.createdAt.getTime(), succeeded!.createdAt.getTime(), 'one transaction (now() is its start)')
})
