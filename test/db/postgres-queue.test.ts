// postgres.js keeps its pool's connections in queues (idle, busy, full, ...). Before our patch
// (patches/postgres+3.4.9.patch) a queue that never emptied, such as the idle connections of a
// pool opened wide by a burst and then used by fewer callers, kept every slot it had ever
// handed out, and moving a connection scanned them all: every query cost more than the one
// before (about 7 µs more per 20,000 queries on the bench machine), and memory grew with them.
import t from 'tap'
import { embeddedOnly } from '../passes.js'

interface Queue<T> {
  readonly length: number
  push(x: T): T
  shift(): T | undefined
  remove(x: T): T | null
}

// the queue is internal to postgres.js (not in its exports): loaded by path, as the library does
const { default: Queue } = (await import(
  new URL('../../node_modules/postgres/src/queue.js', import.meta.url).href
)) as { default: <T>(initial?: T[]) => Queue<T> }

/** Runs `fn` and answers the longest array `indexOf` was called on meanwhile. */
function longestScan(fn: () => void): number {
  const indexOf = Array.prototype.indexOf
  let longest = 0
  Array.prototype.indexOf = function (this: unknown[], ...args: [unknown, number?]) {
    longest = Math.max(longest, this.length - (args[1] ?? 0))
    return indexOf.apply(this, args)
  }
  try {
    fn()
  } finally {
    Array.prototype.indexOf = indexOf
  }
  return longest
}

t.test('a queue that never empties stays as long as what it holds', embeddedOnly, async (t) => {
  // sixteen idle connections; a caller takes the oldest and gives it back, a hundred thousand times,
  // and each time the pool moves it (removing it from the queue it no longer is in)
  const idle = Queue(Array.from({ length: 16 }, (_, i) => ({ id: i })))
  let served = 0
  const scanned = longestScan(() => {
    for (let i = 0; i < 100_000; i++) {
      const c = idle.shift()!
      idle.remove(c)
      idle.push(c)
      served++
    }
  })
  t.equal(served, 100_000)
  t.equal(idle.length, 16)
  t.ok(scanned <= 16, `a move scanned ${scanned} slots (16 connections queued)`)
})

t.test('the queue keeps its order and its items through the compaction', embeddedOnly, async (t) => {
  const q = Queue<number>()
  const model: number[] = []
  const [got, want] = [[] as unknown[], [] as unknown[]]
  let next = 0
  // a deterministic mix of pushes, shifts and removals, never letting the queue empty for long
  for (let step = 0; step < 20_000; step++) {
    const op = (step * 7919) % 10
    if (op < 5 || model.length < 3) {
      q.push(next)
      model.push(next++)
    } else if (op < 9) {
      got.push(q.shift())
      want.push(model.shift())
    } else {
      const victim = model[(step * 31) % model.length]!
      got.push(q.remove(victim))
      want.push(victim)
      model.splice(model.indexOf(victim), 1)
    }
    got.push(q.length)
    want.push(model.length)
  }
  t.same(got, want, 'every shift, removal and length as an array would answer')
  t.equal(q.remove(-1), null, 'an item not queued is not found')
  const rest: number[] = []
  while (q.length > 0) rest.push(q.shift()!)
  t.same(rest, model, 'what is left comes out in order')
})
