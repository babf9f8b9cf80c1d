import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

/** Seconds a client refused at shutdown is told to wait (another instance, or this one restarted, answers). */
export const SHUTDOWN_RETRY_AFTER_S = 1

/**
 * Shutdown refusals: once the app starts closing (SIGTERM), a new request is answered
 * `503 service_unavailable` with `Retry-After` and `Connection: close`, in the error body
 * every answer uses and with the fixed headers (release, security, request id) the hook
 * registered before this one set. Requests already in flight finish. Fastify's own
 * refusal (`return503OnClosing`) is off: its body has another shape and no headers.
 */
export default fp(async function shutdownRefusals(app: FastifyInstance) {
  let closing = false
  // registered before every other plugin's, so it runs first when the app closes
  app.addHook('preClose', (done) => {
    closing = true
    app.log.info('shutting down: new requests are answered 503')
    done()
  })
  // a callback hook, as the headers' one: no promise per request on the hot path
  app.addHook('onRequest', function refuseWhileClosing(request, reply, done) {
    if (!closing) return done()
    request.log.info('request refused: shutting down')
    void reply.code(503)
      .headers({ 'retry-after': String(SHUTDOWN_RETRY_AFTER_S), connection: 'close' })
      .type('application/json; charset=utf-8')
      .send({ error: 'service_unavailable', message: 'this server is shutting down; retry shortly' })
  })
}, { name: 'shutdown-refusals', fastify: '5.x', dependencies: ['security-headers'] })
