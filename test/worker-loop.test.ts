import { once } from 'node:events'
import t from 'tap'
import {
  backoffDelay,
  createWorkerLoop,
  LoopStopped,
  type LoopTimers,
  type WorkerLoopOptions
} from '../src/worker-loop.js'

/** Timers a test moves by hand: nothing waits for real time. */
class ManualTimers implements LoopTimers {
  private next = 1
  readonly pending = new Map<number, { ms: number; fn: () => void }>()
  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.next++
    this.pending.set(id, { ms, fn })
    return id
  }
  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number)
  }
  /** the delays of the timers set now */
  delays(): number[] {
    return [...this.pending.values()].map((p) => p.ms).sort((a, b) => a - b)
  }
  /** fires the timers set with this delay */
  fire(ms: number): number {
    const due = [...this.pending.entries()].filter(([, p]) => p.ms === ms)
    for (const [id, p] of due) {
      this.pending.delete(id)
      p.fn()
    }
    return due.length
  }
}

function deferred<T = void>() {
  let resolve!: (value: T) => void
  let reject!: (err: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/** A queue of calls a test answers one by one, and awaits as they come. */
class Calls<A, R> {
  private readonly waiting: Array<(call: { arg: A; answer: ReturnType<typeof deferred<R>> }) => void> = []
  private readonly queued: Array<{ arg: A; answer: ReturnType<typeof deferred<R>> }> = []
  count = 0
  readonly fn = (arg: A): Promise<R> => {
    this.count++
    const call = { arg, answer: deferred<R>() }
    const waiter = this.waiting.shift()
    if (waiter) waiter(call)
    else this.queued.push(call)
    return call.answer.promise
  }
  next(): Promise<{ arg: A; answer: ReturnType<typeof deferred<R>> }> {
    const call = this.queued.shift()
    if (call) return Promise.resolve(call)
    return new Promise((resolve) => this.waiting.push(resolve))
  }
}

const silent = { warn() {}, error() {} }

function loopOf(
  over: Partial<WorkerLoopOptions<string>> & {
    claims: Calls<void, string | null>
    works?: Calls<{ item: string; signal: AbortSignal }, void>
  }
) {
  const timers = new ManualTimers()
  const { claims, works, ...rest } = over
  const loop = createWorkerLoop<string>({
    name: 'test loop',
    log: silent,
    pollMs: 1000,
    timers,
    claim: () => claims.fn(),
    ...(works ? { work: (item: string, signal: AbortSignal) => works.fn({ item, signal }) } : {}),
    ...rest
  })
  return { loop, timers }
}

t.test('backoffDelay: equal jitter, doubling per attempt, capped', async (t) => {
  t.equal(
    backoffDelay(1, 100, 10_000, () => 0),
    50
  )
  t.equal(
    backoffDelay(1, 100, 10_000, () => 1),
    100
  )
  t.equal(
    backoffDelay(4, 100, 10_000, () => 1),
    800
  )
  t.equal(
    backoffDelay(30, 100, 10_000, () => 1),
    10_000
  )
})

t.test('claims up to the concurrency, one pass at a time; finished work frees a slot and claims again', async (t) => {
  const claims = new Calls<void, string | null>()
  const works = new Calls<{ item: string; signal: AbortSignal }, void>()
  const { loop } = loopOf({ claims, works, concurrency: 2 })
  loop.start()
  ;(await claims.next()).answer.resolve('a')
  ;(await claims.next()).answer.resolve('b')
  const a = await works.next()
  await works.next()
  t.same(loop.inFlight, ['a', 'b'])
  t.equal(claims.count, 2, 'no claim while every slot is taken')
  loop.wake()
  t.equal(claims.count, 2, 'a wake-up with full slots claims nothing')
  a.answer.resolve()
  ;(await claims.next()).answer.resolve(null)
  t.equal(claims.count, 3, 'a finished piece of work claims again')
  loop.kill()
})

t.test('polls as a fallback and wakes on a notification; a wake-up during a pass runs another after it', async (t) => {
  const claims = new Calls<void, string | null>()
  let notify = () => {}
  const { loop, timers } = loopOf({
    claims,
    listen: (wake) => {
      notify = wake
      return []
    }
  })
  loop.start()
  const first = await claims.next()
  notify()
  first.answer.resolve(null)
  ;(await claims.next()).answer.resolve(null)
  t.equal(claims.count, 2, 'the notification during the pass ran one more')
  // idle: the next look is at the poll
  while (timers.delays().length === 0) await Promise.resolve()
  t.same(timers.delays(), [1000])
  timers.fire(1000)
  ;(await claims.next()).answer.resolve(null)
  t.equal(claims.count, 3, 'the poll looked again')
  await loop.stop()
})

t.test('failed claims back off (at least the poll), and a success resets it', async (t) => {
  const claims = new Calls<void, string | null>()
  const { loop, timers } = loopOf({ claims, backoff: { baseMs: 4000, maxMs: 16_000 } })
  loop.start()
  const waitForTimer = async () => {
    while (timers.delays().length === 0) await Promise.resolve()
    return timers.delays()[0]!
  }
  ;(await claims.next()).answer.reject(new Error('the database is away'))
  const one = await waitForTimer()
  t.ok(one >= 2000 && one <= 4000, `first failure waits d/2..d of the base (${one})`)
  timers.fire(one)
  ;(await claims.next()).answer.reject(new Error('the database is away'))
  const two = await waitForTimer()
  t.ok(two >= 4000 && two <= 8000, `the second doubles (${two})`)
  timers.fire(two)
  ;(await claims.next()).answer.resolve(null)
  t.equal(await waitForTimer(), 1000, 'a claim that answers goes back to the poll')
  await loop.stop()
})

t.test('renews the leases of the work in flight', async (t) => {
  const claims = new Calls<void, string | null>()
  const works = new Calls<{ item: string; signal: AbortSignal }, void>()
  const renewed: string[][] = []
  const { loop, timers } = loopOf({
    claims,
    works,
    lease: { everyMs: 300, renew: async (items) => void renewed.push(items) }
  })
  loop.start()
  ;(await claims.next()).answer.resolve('a')
  const work = await works.next()
  t.equal(timers.fire(300), 1)
  while (renewed.length === 0) await Promise.resolve()
  t.same(renewed, [['a']])
  work.answer.resolve()
  await loop.stop()
})

t.test(
  'a drain hands the work back (its signal aborts) and waits for it; a claim in flight is handed back too',
  async (t) => {
    const claims = new Calls<void, string | null>()
    const works = new Calls<{ item: string; signal: AbortSignal }, void>()
    const { loop } = loopOf({ claims, works, concurrency: 2, drain: 'hand-back' })
    loop.start()
    ;(await claims.next()).answer.resolve('a')
    const a = await works.next()
    const late = await claims.next()
    const stopped = loop.stop(60_000)
    late.answer.resolve('b')
    const b = await works.next()
    t.ok(b.arg.signal.aborted, 'claimed as the drain began: handed back at once')
    if (!a.arg.signal.aborted) await once(a.arg.signal, 'abort')
    t.ok(a.arg.signal.reason instanceof LoopStopped && !a.arg.signal.reason.killed, 'a drain, not a kill')
    a.answer.resolve()
    b.answer.resolve()
    t.same(await stopped, { items: ['a', 'b'], left: [] })
    t.equal(claims.count, 2, 'nothing claimed after the drain began')
  }
)

t.test('a drain that hangs ends at its deadline, the work left to its lease', async (t) => {
  const claims = new Calls<void, string | null>()
  const works = new Calls<{ item: string; signal: AbortSignal }, void>()
  const { loop, timers } = loopOf({ claims, works, drain: 'finish' })
  loop.start()
  ;(await claims.next()).answer.resolve('stuck')
  const work = await works.next()
  const stopped = loop.stop(5000)
  t.notOk(work.arg.signal.aborted, 'a finishing drain lets the work go on')
  while (!timers.delays().includes(5000)) await Promise.resolve()
  timers.fire(5000)
  t.same(await stopped, { items: ['stuck'], left: ['stuck'] })
})

t.test('a kill aborts the work at once and waits for nothing', async (t) => {
  const claims = new Calls<void, string | null>()
  const works = new Calls<{ item: string; signal: AbortSignal }, void>()
  const { loop, timers } = loopOf({ claims, works, every: [{ everyMs: 500, job: async () => {} }] })
  loop.start()
  ;(await claims.next()).answer.resolve('a')
  const work = await works.next()
  loop.kill()
  t.ok(work.arg.signal.reason instanceof LoopStopped && work.arg.signal.reason.killed)
  t.same(timers.delays(), [], 'no timer left')
  loop.wake()
  t.equal(claims.count, 1, 'a killed loop claims nothing')
  t.same(await loop.stop(), { items: [], left: [] })
})

t.test('a claim of several fills the free slots at once; each piece is worked, leased and drained alone', async (t) => {
  const claims = new Calls<number, string[]>()
  const works = new Calls<{ item: string; signal: AbortSignal }, void>()
  const renewed: string[][] = []
  const timers = new ManualTimers()
  const loop = createWorkerLoop<string>({
    name: 'test loop',
    log: silent,
    pollMs: 1000,
    timers,
    concurrency: 3,
    claimMany: (room) => claims.fn(room),
    work: (item, signal) => works.fn({ item, signal }),
    lease: { everyMs: 300, renew: async (items) => void renewed.push(items) },
    drain: 'hand-back'
  })
  loop.start()
  const first = await claims.next()
  t.equal(first.arg, 3, 'asked for every free slot')
  first.answer.resolve(['a', 'b'])
  const a = await works.next()
  const b = await works.next()
  t.same([a.arg.item, b.arg.item], ['a', 'b'])
  const second = await claims.next()
  t.equal(second.arg, 1, 'the pass goes on for the slot left')
  second.answer.resolve([])
  t.equal(timers.fire(300), 1)
  while (renewed.length === 0) await Promise.resolve()
  t.same(renewed, [['a', 'b']], 'their leases renewed together')
  a.answer.resolve()
  const third = await claims.next()
  t.equal(third.arg, 2, 'a finished piece frees its slot')
  third.answer.resolve(['c'])
  const c = await works.next()
  ;(await claims.next()).answer.resolve([])
  const stopped = loop.stop(60_000)
  await once(c.arg.signal, 'abort')
  t.ok(b.arg.signal.aborted, 'each handed back at the drain')
  b.answer.resolve()
  c.answer.resolve()
  t.same(await stopped, { items: ['b', 'c'], left: [] })
})
