import type { NewEvent } from './events.js'

/** Events that wait for the run's next write instead of costing one of their own. */
const DEFERRED = new Set(['message.completed'])
/**
 * Events whose emitter goes on before they are stored: what the run says and what it was
 * reminded of. Nothing the engine does next depends on them being stored, and a failed
 * write still fails the run's next wait (the engine never gets far ahead of an error).
 */
const UNAWAITED = new Set(['message.delta', 'memory.recalled'])
/** Past this many events waiting, an emitter waits for them to be stored (a bound, not a batch size). */
const MAX_WAITING = 256

/**
 * The events of one running run, on their way to the database. A run's events are stored in
 * the order they were emitted, at most one write of them in flight; what is emitted
 * meanwhile goes together as the next write (one statement, EventBatcher.appendAll). Token
 * deltas (and `memory.recalled`) do not wait for their write (the next event that is not
 * one does, so the engine never gets ahead of an error), and their write starts only once
 * the event loop has turned (setImmediate): what an engine emits in one go is one write, and
 * an engine that answers at once (echo) has emitted everything before it starts (`hold`).
 * Every other event waits until it is stored, except `message.completed`, which waits for
 * the run's next write: most often the one that ends the run, in the same statement
 * (`take`). So an echo run's events after its start and its end are one statement, and a
 * model streaming faster than the database answers costs one statement per round trip, not
 * per token.
 */
export class RunEventWriter {
  private waiting: NewEvent[] = []
  private inFlight: Promise<void> | null = null
  /** a write failed: every later wait throws it (the run ends as that failure says) */
  private failure: { error: unknown } | null = null
  /** a write of unawaited events, asked for, starts at the next turn of the event loop */
  private later: NodeJS.Immediate | null = null
  private readonly write: (events: NewEvent[]) => Promise<void>

  /** `write` stores events in one go (retried as the run's other writes are) or throws. */
  constructor(write: (events: NewEvent[]) => Promise<void>) {
    this.write = write
  }

  /** Queues the event; resolves once it is stored, or at once for a delta or a deferred event. */
  async emit(event: NewEvent): Promise<void> {
    this.check()
    this.waiting.push(event)
    if (DEFERRED.has(event.type)) return
    if (!UNAWAITED.has(event.type) || this.waiting.length > MAX_WAITING) {
      this.kick()
      await this.flush()
    } else if (!this.inFlight && !this.later)
      this.later = setImmediate(() => {
        this.later = null
        this.kick()
      })
  }

  /**
   * The engine has returned: a write asked for and not started is not made; what waits goes
   * with the run's end (`take`) or the next flush.
   */
  hold(): void {
    if (this.later) clearImmediate(this.later)
    this.later = null
  }

  /** Until every event emitted so far is stored (the deferred ones too). */
  async flush(): Promise<void> {
    for (;;) {
      this.check()
      if (this.inFlight) await this.inFlight
      else if (this.waiting.length > 0) this.kick(true)
      else return
    }
  }

  /** Until no write is in flight; throws what a write failed with. What waits stays waiting. */
  async settled(): Promise<void> {
    while (this.inFlight) await this.inFlight
    this.check()
  }

  /**
   * For the write that ends the run: waits for the write in flight, then hands over what is
   * still waiting, to be stored in the run's last transaction, leaving nothing here. After
   * a failed write, nothing: what followed it would leave a gap in the run's stream.
   */
  async take(): Promise<NewEvent[]> {
    this.hold()
    while (this.inFlight) await this.inFlight
    const rest = this.failure ? [] : this.waiting
    this.waiting = []
    return rest
  }

  private check(): void {
    if (this.failure) throw this.failure.error
  }

  /** Starts writing what waits: everything, or (`all` false) up to the last event that is not deferred. */
  private kick(all = false): void {
    if (this.inFlight || this.failure) return
    this.hold()
    const upTo = all ? this.waiting.length : this.waiting.findLastIndex((e) => !DEFERRED.has(e.type)) + 1
    if (upTo === 0) return
    const batch = this.waiting.slice(0, upTo)
    this.waiting = this.waiting.slice(upTo)
    this.inFlight = this.write(batch).then(
      () => {
        this.inFlight = null
        // what came meanwhile goes next; deferred events at its end keep waiting
        this.kick()
      },
      (error: unknown) => {
        this.inFlight = null
        this.failure = { error }
      }
    )
  }
}
