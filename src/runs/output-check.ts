import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import type { CheckAnswer, CheckRequest } from './output-check-worker.js'
import type { RunSettings } from './tables.js'

interface Job {
  schema: Record<string, unknown>
  output: string
  resolve: (violation: string | null) => void
}

/** The thread's heap and stack: a check that needs more fails, the service does not. */
const LIMITS = { maxOldGenerationSizeMb: 128, stackSizeMb: 4 }

/**
 * Checks a succeeded run's output against its response format: null when it holds, else
 * the run's `error` (`output_invalid: …`, naming the first violation). A `json_schema`
 * check runs in a thread of its own (output-check-worker.ts), one at a time, each within
 * `timeoutMs` (RUN_OUTPUT_CHECK_TIMEOUT_MS): past it the thread is ended, the run fails
 * and the next check gets a new thread. The event loop never waits for a check.
 */
export class OutputChecker {
  private worker: Worker | null = null
  private ready = false
  private readonly queue: Job[] = []
  private current: { id: number; job: Job; timer: NodeJS.Timeout } | null = null
  private nextId = 1
  private closed = false
  private readonly timeoutMs: number

  constructor(timeoutMs: number) {
    this.timeoutMs = timeoutMs
  }

  /** checks waiting or under way */
  get pending(): number {
    return this.queue.length + (this.current ? 1 : 0)
  }

  check(settings: RunSettings, output: string): Promise<string | null> {
    const format = settings.responseFormat
    if (!format || format.type === 'text') return Promise.resolve(null)
    if (format.type === 'json_object') return Promise.resolve(objectViolation(output))
    if (this.closed) return Promise.resolve('output_invalid: the service stopped before the output was checked')
    return new Promise((resolve) => {
      this.queue.push({ schema: format.schema, output, resolve })
      this.pump()
    })
  }

  async close(): Promise<void> {
    this.closed = true
    const worker = this.worker
    this.worker = null
    this.failAll('output_invalid: the service stopped before the output was checked')
    if (worker) await worker.terminate()
  }

  private pump(): void {
    if (this.current || this.queue.length === 0 || this.closed) return
    if (!this.worker) {
      this.start()
      return
    }
    if (!this.ready) return
    const job = this.queue.shift()!
    const id = this.nextId++
    const worker = this.worker
    const timer = setTimeout(() => {
      if (this.current?.id !== id) return
      this.settle(`output_invalid: the output could not be checked against the schema within ${this.timeoutMs} ms`)
      this.drop(worker)
    }, this.timeoutMs)
    this.current = { id, job, timer }
    worker.postMessage({ id, schema: job.schema, output: job.output } satisfies CheckRequest)
  }

  private start(): void {
    const worker = startWorker()
    this.worker = worker
    this.ready = false
    worker.unref()
    worker.on('message', (answer: CheckAnswer) => {
      if (this.worker !== worker) return
      if ('ready' in answer) {
        this.ready = true
      } else if (this.current?.id === answer.id) {
        this.settle(answer.violation)
      }
      this.pump()
    })
    const gone = (reason: string) => {
      if (this.worker !== worker) return
      const started = this.ready
      this.worker = null
      if (this.current) this.settle(`output_invalid: the output could not be checked against the schema (${reason})`)
      // a thread that could not even start would fail every check the same way: none waits forever
      if (!started) this.failAll(`output_invalid: the output could not be checked against the schema (${reason})`)
      this.pump()
    }
    worker.on('error', (err) => gone(err.name))
    worker.on('exit', (code) => gone(`the checking thread stopped with code ${code}`))
  }

  private settle(violation: string | null): void {
    const current = this.current
    if (!current) return
    this.current = null
    clearTimeout(current.timer)
    current.job.resolve(violation)
  }

  private drop(worker: Worker): void {
    if (this.worker === worker) this.worker = null
    void worker.terminate()
    this.pump()
  }

  private failAll(violation: string): void {
    this.settle(violation)
    for (const job of this.queue.splice(0)) job.resolve(violation)
  }
}

function objectViolation(output: string): string | null {
  let value: unknown
  try {
    value = JSON.parse(output)
  } catch {
    return 'output_invalid: the output is not JSON'
  }
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? null
    : 'output_invalid: the output is not a JSON object'
}

/**
 * The thread from its compiled `.js`, or from the `.ts` source when the service runs from its
 * sources (tests, bench): a worker thread inherits the process's `--import` loader.
 */
function startWorker(): Worker {
  const compiled = new URL('./output-check-worker.js', import.meta.url)
  const file = existsSync(fileURLToPath(compiled)) ? compiled : new URL('./output-check-worker.ts', import.meta.url)
  return new Worker(file, { resourceLimits: LIMITS })
}
