import { EventEmitter } from 'node:events'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Worker, type ResourceLimits } from 'node:worker_threads'
import type { FromWorker, PgliteWorkerData, ToWorker } from './pglite-worker.js'

/**
 * The embedded database in its own thread (src/db/pglite-worker.ts). `socket()` is what
 * postgres.js's `socket` option asks for: a connection to that thread, so the service
 * reaches PGlite with the same driver, prepared statements and pipelining as a real
 * server. One connection at a time (PGlite has one session): the pool has one.
 */
export class PgliteThread {
  private readonly listeners = new Map<string, Set<(payload: string) => void>>()
  private current: ThreadSocket | null = null
  private closed: Promise<void> | null = null
  private failure: Error | null = null

  private readonly worker: Worker

  private constructor(worker: Worker) {
    this.worker = worker
    worker.on('message', (message: FromWorker) => this.receive(message))
    worker.on('error', (err) => this.fail(err))
    worker.on('exit', (code) => this.fail(new Error(`the embedded database stopped (exit code ${code})`)))
  }

  /**
   * Starts the thread and waits until PGlite is open (its data loaded, or created).
   * `limits` caps the thread's heap (a test's way to catch a leak there); `template`, a
   * data directory dump a new database starts from.
   */
  static async start(location: string, limits?: ResourceLimits, template?: string): Promise<PgliteThread> {
    const worker = startWorker({ location, ...(template ? { template } : {}) }, limits)
    let onMessage!: (message: FromWorker) => void
    let onError!: (err: Error) => void
    let onExit!: (code: number) => void
    const answer = await new Promise<FromWorker>((resolve, reject) => {
      onMessage = resolve
      onError = reject
      onExit = (code) => reject(new Error(`the embedded database did not start (exit code ${code})`))
      worker.once('message', onMessage).once('error', onError).once('exit', onExit)
    }).finally(() => {
      // only these: a Worker's own listeners (removeAllListeners) would stop its messages
      worker.off('message', onMessage).off('error', onError).off('exit', onExit)
    })
    if (answer.type !== 'ready') {
      await worker.terminate()
      throw new Error(answer.type === 'failed' ? answer.message : 'the embedded database did not start')
    }
    return new PgliteThread(worker)
  }

  /** A new connection (postgres.js opens one, and another after it ended one). */
  socket(): ThreadSocket {
    // refused as a server that is gone refuses: each query postgres.js still holds fails
    // in turn (a thrown error would fail one and leave the rest waiting forever)
    if (this.failure || this.closed)
      return ThreadSocket.refused(this.failure ?? new Error('the embedded database is closed'))
    this.current?.gone(null)
    const socket = new ThreadSocket(
      (message) => this.send(message),
      () => {
        if (this.current === socket) this.current = null
      }
    )
    this.current = socket
    this.send({ type: 'connect' })
    return socket
  }

  /**
   * Calls `fn` with the payload of every NOTIFY on `channel` (once the session LISTENs to
   * it). `first`: no one listened to the channel before, so the session must LISTEN;
   * `stop()` answers whether that was the last, so the session may UNLISTEN. Instances
   * sharing this database (tests) share its one session and its LISTENs.
   */
  onNotification(channel: string, fn: (payload: string) => void): { first: boolean; stop(): boolean } {
    let set = this.listeners.get(channel)
    if (!set) this.listeners.set(channel, (set = new Set()))
    const first = set.size === 0
    const own = (payload: string) => fn(payload)
    set.add(own)
    return {
      first,
      stop: () => set.delete(own) && set.size === 0
    }
  }

  /** Lets PGlite finish and close its files; the thread ends. */
  close(): Promise<void> {
    this.closed ??= new Promise<void>((resolve) => {
      // a query still queued in the pool fails instead of waiting for a connection forever
      this.current?.gone(new Error('the embedded database is closed'))
      if (this.failure) return resolve()
      this.worker.once('exit', () => resolve())
      this.send({ type: 'close' })
    })
    return this.closed
  }

  private send(message: ToWorker): void {
    if (message.type === 'data') this.worker.postMessage(message, [message.bytes.buffer as ArrayBuffer])
    else this.worker.postMessage(message)
  }

  private receive(message: FromWorker): void {
    switch (message.type) {
      case 'data':
        this.current?.deliver(message.bytes)
        break
      case 'notification':
        for (const fn of this.listeners.get(message.channel) ?? []) fn(message.payload)
        break
      case 'error':
        this.fail(new Error(`the embedded database failed: ${message.message}`))
        break
      default:
        break
    }
  }

  private fail(err: Error): void {
    if (this.failure || this.closed) return
    this.failure = err
    this.current?.gone(err)
  }
}

/**
 * The worker from its compiled `.js`, or from the `.ts` source when the service runs from its
 * sources (tests, bench): a worker thread inherits the process's `--import` loader (tsx, or
 * scripts/ts-resolve.mjs in the tests), so it loads the source as the main thread does.
 */
function startWorker(data: PgliteWorkerData, resourceLimits?: ResourceLimits): Worker {
  const compiled = new URL('./pglite-worker.js', import.meta.url)
  const file = existsSync(fileURLToPath(compiled)) ? compiled : new URL('./pglite-worker.ts', import.meta.url)
  return new Worker(file, { workerData: data, resourceLimits })
}

/**
 * What postgres.js needs of a socket: write, end, destroy, `readyState`, and `data`,
 * `close` and `error` events. Writes are posted as they come: postgres.js already joins
 * the messages of one tick into one write.
 */
export class ThreadSocket extends EventEmitter {
  readyState: 'open' | 'closed' = 'open'
  private readonly post: (message: ToWorker) => void
  private readonly onGone: () => void

  constructor(post: (message: ToWorker) => void, onGone: () => void) {
    super()
    this.post = post
    this.onGone = onGone
  }

  write(chunk: Uint8Array | string, callback?: () => void): boolean {
    if (this.readyState === 'open') {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
      // a copy the thread can own (postgres.js may reuse its buffers)
      this.post({ type: 'data', bytes: new Uint8Array(bytes) })
    }
    if (callback) queueMicrotask(callback)
    return true
  }

  end(chunk?: Uint8Array): void {
    if (chunk) this.write(chunk)
    this.gone(null)
  }

  destroy(): void {
    this.gone(null)
  }

  /** A connection that fails at once, the way a refused TCP connection does. */
  static refused(err: Error): ThreadSocket {
    const socket = new ThreadSocket(
      () => {},
      () => {}
    )
    socket.readyState = 'closed'
    // after postgres.js has attached its listeners (it does once the factory returns)
    setImmediate(() => {
      socket.emit('error', err)
      socket.emit('close', true)
    })
    return socket
  }

  pause(): void {}
  resume(): void {}

  /** Answer bytes from the thread. */
  deliver(bytes: Uint8Array): void {
    if (this.readyState === 'open') this.emit('data', Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))
  }

  /** The connection is over: ended here, replaced, or the thread failed. */
  gone(err: Error | null): void {
    if (this.readyState === 'closed') return
    this.readyState = 'closed'
    this.post({ type: 'disconnect' })
    this.onGone()
    queueMicrotask(() => {
      if (err) this.emit('error', err)
      this.emit('close', Boolean(err))
    })
  }
}
