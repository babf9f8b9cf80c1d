import { failureSentence } from './db/faults.js'

/** Where time-driven code reads the time: the system clock, or a test's. */
export interface Clock {
  now(): Date
}
export const systemClock: Clock = { now: () => new Date() }

/** Where a loop's waits come from: the system's timers (never holding the process open), or a test's. */
export interface LoopTimers {
  setTimeout(fn: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}
export const systemTimers: LoopTimers = {
  setTimeout(fn, ms) {
    const timer = setTimeout(fn, ms)
    timer.unref()
    return timer
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout)
}

/** Exponential backoff with equal jitter: attempt n waits between d/2 and d, d = base·2^(n−1). */
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, random = Math.random): number {
  const d = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1))
  return Math.round(d / 2 + random() * (d / 2))
}

/** Why a loop aborted its work: the instance is draining (hand the work back) or was killed (write nothing more). */
export class LoopStopped extends Error {
  override name = 'LoopStopped'
  readonly killed: boolean
  constructor(killed: boolean) {
    super(killed ? 'the worker was killed' : 'the worker is draining')
    this.killed = killed
  }
}

/** What a loop logs with (a pino logger); without `error`, errors go to `warn`. */
export interface LoopLog {
  warn(obj: object, msg: string): void
  error?(obj: object, msg: string): void
}

export interface WorkerLoopOptions<T> {
  /** for log lines: `${name}: claiming failed` */
  name: string
  log: LoopLog
  /**
   * Takes one piece of work (a row, or a batch of rows) under a lease, or null when none is
   * due. A claim that also does the work in its own transaction (the scheduler) returns null.
   */
  claim?(): Promise<T | null>
  /**
   * Instead of `claim`: takes up to `room` pieces of work in one go ([]: none is due), so that one round trip can fill
   * several free slots. Each piece is worked (and leased, and drained) as one claimed alone.
   */
  claimMany?(room: number): Promise<T[]>
  /** Does claimed work. `signal` aborts with a LoopStopped: at a kill, and at a drain that hands work back. */
  work?(item: T, signal: AbortSignal): Promise<void>
  /**
   * pieces of work in flight at once; 0 (or no `claim` nor `claimMany`: a loop of `every` jobs only): the loop claims
   * nothing
   */
  concurrency?: number
  /** how often an idle loop looks again when nothing woke it (the fallback to `listen`) */
  pollMs: number
  /** when an idle loop looks again, if it knows better than `pollMs` (the scheduler's next tick) */
  idleMs?(): Promise<number>
  /** failed claims wait longer each time (at least `pollMs`); without it they wait `pollMs` */
  backoff?: { baseMs: number; maxMs: number }
  /** whether finished work suggests more is due at once (a full batch); else the loop waits for the poll */
  claimAgain?(item: T): boolean
  /**
   * whether a pass goes on claiming after this claim (it said others are due); else it ends and the loop waits for the
   * poll or a wake
   */
  claimMore?(item: T): boolean
  /** a wakeSoon() waits this long, so that notifications close together share one claim */
  wakeDelayMs?: number
  /** subscribes `wake` (wakeSoon) to what announces work (NOTIFY through the event bus); returns the unsubscribers */
  listen?(wake: () => void): Array<() => void>
  /** renews the leases of the work in flight, every `everyMs` while there is any */
  lease?: { everyMs: number; renew(items: T[]): Promise<void> }
  /** jobs beside the claims (sweeps, pruning), each every `everyMs`; a drain waits for the one in flight */
  every?: Array<{ everyMs: number; job(): Promise<unknown> }>
  /** at a drain, the work in flight is asked to hand itself back (its signal aborts), or let finish */
  drain?: 'hand-back' | 'finish'
  timers?: LoopTimers
}

export interface DrainResult<T> {
  /** the work in flight when the drain began (and claimed during it) */
  items: T[]
  /** what had not finished by the deadline: left to its lease */
  left: T[]
}

export interface WorkerLoop<T> {
  start(): void
  /** looks for work now instead of at the next poll */
  wake(): void
  /** looks for work after `wakeDelayMs` (a notification: others close behind it share the claim) */
  wakeSoon(): void
  /** claims nothing more and waits, at most `deadlineMs`, for the work in flight and the jobs */
  stop(deadlineMs?: number): Promise<DrainResult<T>>
  /** a crash: everything stops at once and the work in flight is aborted; nothing is awaited */
  kill(): void
  /** a promise the drain also waits for (work started outside the claims) */
  track(work: Promise<unknown>): void
  readonly inFlight: T[]
  readonly stopping: boolean
  readonly killed: boolean
}

interface Running<T> {
  item: T
  controller: AbortController
  done: Promise<void>
}

/**
 * The one shape of a background loop: wake on a notification, poll as a fallback, claim in
 * a loop up to a concurrency, renew the leases of what is in flight, back off when claims
 * fail, and drain on shutdown within a deadline (work not done by then is left to its
 * lease, which hands it to another instance). One pass of claims runs at a time; a wake-up
 * during a pass runs another after it.
 */
export function createWorkerLoop<T>(o: WorkerLoopOptions<T>): WorkerLoop<T> {
  const timers = o.timers ?? systemTimers
  const one = o.claim
  const claim: ((room: number) => Promise<T[]>) | undefined =
    o.claimMany ??
    (one &&
      (async () => {
        const item = await one()
        return item === null ? [] : [item]
      }))
  const concurrency = claim ? (o.concurrency ?? 1) : 0
  const running = new Set<Running<T>>()
  const tracked = new Set<Promise<unknown>>()
  const unsubscribers: Array<() => void> = []
  const repeating = new Set<unknown>()
  let started = false
  let stopping = false
  let killed = false
  let passing: Promise<void> | null = null
  let again = false
  let poll: unknown = null
  let soon: unknown = null
  let failures = 0
  const logError = (obj: object, msg: string) => (o.log.error ?? o.log.warn).call(o.log, obj, msg)

  function track(work: Promise<unknown>): void {
    const p = work.catch(() => {}).finally(() => tracked.delete(p))
    tracked.add(p)
  }

  function schedule(ms: number): void {
    if (!started || stopping) return
    if (poll !== null) timers.clearTimeout(poll)
    poll = timers.setTimeout(() => {
      poll = null
      pass()
    }, ms)
  }

  /** Runs `job` every `ms` (one at a time) until the loop stops. */
  function every(ms: number, job: () => Promise<unknown>): void {
    const tick = () => {
      repeating.delete(handle)
      if (stopping) return
      const p = job().catch((err: unknown) => {
        if (!killed) o.log.warn({ err }, `${o.name}: a periodic job failed`)
      })
      track(p)
      void p.then(() => {
        if (!stopping) every(ms, job)
      })
    }
    const handle = timers.setTimeout(tick, ms)
    repeating.add(handle)
  }

  function begin(item: T): void {
    const controller = new AbortController()
    const entry: Running<T> = { item, controller, done: Promise.resolve() }
    running.add(entry)
    // claimed as the drain began: handed back at once
    if (stopping && o.drain === 'hand-back') controller.abort(new LoopStopped(killed))
    entry.done = (o.work ? o.work(item, controller.signal) : Promise.resolve())
      .catch((err: unknown) => {
        if (!killed) logError({ err }, `${o.name}: work failed unexpectedly`)
      })
      .finally(() => {
        running.delete(entry)
        if (stopping) return
        if (!o.claimAgain || o.claimAgain(item)) pass()
        else schedule(o.pollMs)
      })
  }

  /** Claims until nothing is due or every slot is taken; when to look again (null: when work finishes). */
  async function claimPass(): Promise<number | null> {
    while (!stopping && running.size < concurrency) {
      let items: T[]
      try {
        items = await claim!(concurrency - running.size)
      } catch (err) {
        failures++
        // a sentence: never the failed query or its values
        if (!stopping) logError({ err }, `${o.name}: claiming failed: ${failureSentence(err)}`)
        return o.backoff ? Math.max(o.pollMs, backoffDelay(failures, o.backoff.baseMs, o.backoff.maxMs)) : o.pollMs
      }
      failures = 0
      if (items.length === 0) {
        if (stopping || !o.idleMs) return o.pollMs
        try {
          return await o.idleMs()
        } catch (err) {
          if (!stopping) o.log.warn({ err }, `${o.name}: reading when to look again failed`)
          return o.pollMs
        }
      }
      for (const item of items) begin(item)
      if (o.claimMore && !o.claimMore(items[items.length - 1]!)) return o.pollMs
    }
    return null
  }

  function pass(): void {
    if (!started || stopping || concurrency <= 0) return
    if (passing) {
      again = true
      return
    }
    if (poll !== null) timers.clearTimeout(poll)
    poll = null
    passing = claimPass().then((next) => {
      passing = null
      if (again) {
        again = false
        pass()
      } else if (next !== null) schedule(next)
    })
  }

  function wakeSoon(): void {
    if (!started || stopping) return
    if (!o.wakeDelayMs) return pass()
    if (soon !== null) return
    soon = timers.setTimeout(() => {
      soon = null
      pass()
    }, o.wakeDelayMs)
  }

  function quiet(): void {
    for (const handle of [poll, soon, ...repeating]) if (handle !== null) timers.clearTimeout(handle)
    poll = soon = null
    repeating.clear()
    for (const unsubscribe of unsubscribers.splice(0)) unsubscribe()
  }

  return {
    start() {
      if (started || stopping) return
      started = true
      if (concurrency > 0) {
        unsubscribers.push(...(o.listen?.(wakeSoon) ?? []))
        const lease = o.lease
        if (lease) {
          every(lease.everyMs, async () => {
            if (running.size > 0) await lease.renew([...running].map((r) => r.item))
          })
        }
      }
      for (const { everyMs, job } of o.every ?? []) every(everyMs, job)
      pass()
    },
    wake: pass,
    wakeSoon,
    async stop(deadlineMs = Infinity) {
      if (killed) return { items: [], left: [] }
      stopping = true
      quiet()
      let items: T[] = []
      const drained = (async () => {
        // a claim in flight adds its work, which begin() hands back at once
        await passing
        const entries = [...running]
        items = entries.map((e) => e.item)
        if (o.drain === 'hand-back') for (const e of entries) e.controller.abort(new LoopStopped(false))
        await Promise.all([...entries.map((e) => e.done), ...tracked])
      })()
      if (deadlineMs === Infinity) await drained
      else {
        let timer: unknown = null
        await Promise.race([drained, new Promise<void>((resolve) => (timer = timers.setTimeout(resolve, deadlineMs)))])
        timers.clearTimeout(timer)
      }
      const left = [...running].map((e) => e.item)
      if (left.length > 0)
        o.log.warn(
          { left: left.length },
          `${o.name}: the drain did not finish before its deadline; what is in flight is left to its lease`
        )
      return { items, left }
    },
    kill() {
      killed = true
      stopping = true
      quiet()
      for (const e of running) e.controller.abort(new LoopStopped(true))
    },
    track,
    get inFlight() {
      return [...running].map((e) => e.item)
    },
    get stopping() {
      return stopping
    },
    get killed() {
      return killed
    }
  }
}
