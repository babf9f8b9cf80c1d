import { isDatabaseUnavailable } from './faults.js'

interface Pending<I, O> {
  item: I
  resolve: (out: O) => void
  reject: (err: unknown) => void
}

/**
 * Group commit: while one statement of queued writes is in flight, the writes that come meanwhile wait, and go
 * together as the next one (at most `max` to a statement). Idle, a write is one statement; under load, the round
 * trip and the commit are shared. Each caller's promise settles with its own answer. A failed statement fails every
 * write in it when the database is away (their writers retry); any other failure is retried write by write (`one`),
 * so one bad write does not fail its neighbours. Stopped (`stop`), nothing more is sent: the writes still waiting
 * are rejected with the reason, as is any write after it.
 */
export class GroupCommit<I, O> {
  private queue: Array<Pending<I, O>> = []
  private flushing = false
  private stopped: (() => Error) | null = null

  private readonly o: { max: number; many: (items: I[]) => Promise<O[]>; one: (item: I) => Promise<O> }

  constructor(o: { max: number; many: (items: I[]) => Promise<O[]>; one: (item: I) => Promise<O> }) {
    this.o = o
  }

  add(item: I): Promise<O> {
    if (this.stopped) return Promise.reject(this.stopped())
    const written = new Promise<O>((resolve, reject) => this.queue.push({ item, resolve, reject }))
    this.kick()
    return written
  }

  /** Several writes of one writer, in one batch (so in one statement, when they fit), in order. */
  addAll(items: I[]): Promise<O[]> {
    if (this.stopped) return Promise.reject(this.stopped())
    const written = items.map((item) => new Promise<O>((resolve, reject) => this.queue.push({ item, resolve, reject })))
    this.kick()
    return Promise.all(written)
  }

  /** Nothing more is sent: the writes not sent yet are rejected with `reason()`. */
  stop(reason: () => Error): void {
    this.stopped = reason
    for (const p of this.queue.splice(0)) p.reject(reason())
  }

  private kick(): void {
    if (!this.flushing) void this.flush()
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      while (this.queue.length > 0 && !this.stopped) {
        const batch = this.queue.splice(0, this.o.max)
        try {
          const out = await this.o.many(batch.map((p) => p.item))
          batch.forEach((p, i) => p.resolve(out[i]!))
        } catch (err) {
          if (batch.length === 1 || isDatabaseUnavailable(err) || this.stopped) for (const p of batch) p.reject(err)
          else for (const p of batch) await this.o.one(p.item).then(p.resolve, p.reject)
        }
      }
    } finally {
      this.flushing = false
    }
  }
}
