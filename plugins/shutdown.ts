import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

/** Seconds a client refused at shutdown is told to wait (another instance, or this one restarted, answers). */
export const SHUTDOWN_RETRY_AFTER_S = 1

/**
 * Parts of SHUTDOWN_GRACE_MS, counted from the start of the close: workers drain within the first, what the app holds
 * is closed within the second.
 */
export const DRAIN_SHARE = 0.5
export const CLOSE_SHARE = 0.85

/**
 * The shutdown's clock. Every hook that waits (a worker's drain, a pool's close) waits
 * within the grace: the hooks run one after another, so each gets what is left until a
 * shared deadline, not a fixed time of its own, and one that hangs cannot hold the exit.
 */
export interface ShutdownBudget {
  /**
   * waits for a worker's drain (`stop(ms left)`) until the drain deadline; a drain cut short is logged and left to its
   * leases
   */
  drain(what: string, stop: (deadlineMs: number) => Promise<unknown>): Promise<void>
  /** the same for closing what the app holds (onClose), until the close deadline */
  close(what: string, close: () => Promise<unknown>): Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    shutdown: ShutdownBudget
  }
}

export interface ShutdownOptions {
  /** SHUTDOWN_GRACE_MS */
  graceMs: number
}

/**
 * Shutdown refusals: once the app starts closing (SIGTERM), a new request is answered
 * `503 service_unavailable` with `Retry-After` and `Connection: close`, in the error body
 * every answer uses and with the fixed headers (release, security, request id) the hook
 * registered before this one set. Requests already in flight finish. Fastify's own
 * refusal (`return503OnClosing`) is off: its body has another shape and no headers.
 * Also the shutdown's budget (`app.shutdown`), which every waiting close hook goes through.
 */
export default fp(
  async function shutdownRefusals(app: FastifyInstance, opts: ShutdownOptions) {
    let closing = false
    let closingAt = 0
    const left = (share: number) => Math.max(0, closingAt + Math.floor(opts.graceMs * share) - Date.now())
    async function within(what: string, ms: number, work: Promise<unknown>): Promise<void> {
      let timer: NodeJS.Timeout | undefined
      const cut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), ms)))
      const outcome = work.then(
        () => false,
        (err: unknown) => {
          app.log.warn({ err }, `shutting down: ${what} failed`)
          return false
        }
      )
      const late = await Promise.race([outcome, cut])
      clearTimeout(timer)
      if (late) app.log.warn(`shutting down: ${what} did not finish within the grace; left as it is`)
    }
    app.decorate('shutdown', {
      drain: (what, stop) => {
        const ms = left(DRAIN_SHARE)
        return within(what, ms, stop(ms))
      },
      close: (what, close) => within(what, left(CLOSE_SHARE), close())
    } satisfies ShutdownBudget)
    // registered before every other plugin's, so it runs first when the app closes
    app.addHook('preClose', (done) => {
      closing = true
      closingAt = Date.now()
      app.log.info('shutting down: new requests are answered 503')
      done()
    })
    // a callback hook, as the headers' one: no promise per request on the hot path
    app.addHook('onRequest', function refuseWhileClosing(request, reply, done) {
      if (!closing) return done()
      request.log.info('request refused: shutting down')
      void reply
        .code(503)
        .headers({ 'retry-after': String(SHUTDOWN_RETRY_AFTER_S), connection: 'close' })
        .type('application/json; charset=utf-8')
        .send({ error: 'service_unavailable', message: 'this server is shutting down; retry shortly' })
    })
  },
  { name: 'shutdown-refusals', fastify: '5.x', dependencies: ['security-headers'] }
)
