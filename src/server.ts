import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.js'
import { ConfigError, loadConfig, type Config } from './config.js'
import { describeListening, startFailure } from './startup.js'
import { isDatabaseUnavailable } from './db/faults.js'

/** Stops a start that cannot go on: one sentence on stderr, exit 1. */
function fail(message: string): never {
  process.stderr.write(`cairn: ${message}\n`)
  process.exit(1)
}

let config: Config
try {
  config = loadConfig()
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  fail(err.message)
}

let app: FastifyInstance
try {
  app = await buildApp({ config })
} catch (err) {
  const sentence = startFailure(err, config)
  if (sentence === null) throw err
  fail(sentence)
}

// A rejection nobody awaited that only says the database is away must not end the
// process (contract 1.3): the pool and LISTEN reconnect by themselves. Any other one is
// rethrown as an uncaught exception, which shuts down gracefully below.
process.on('unhandledRejection', (reason) => {
  if (!isDatabaseUnavailable(reason)) throw reason
  app.log.error({ err: reason }, 'unawaited database failure (the database is unavailable; not fatal)')
})

// SIGTERM/SIGINT: refuse new requests (503), hand running runs back to the queue, end
// event streams and WebSockets with a reconnectable close, let in-flight requests finish,
// close the database, exit 0, all within SHUTDOWN_GRACE_MS. Connections still busy at
// four fifths of it are cut, so that the close ends in time rather than by the timer of
// close-with-grace (which exits 1). Every hook that waits is bounded by the grace
// (plugins/shutdown.ts: workers drain within half of it, anything else a worker left is
// its lease's); should a close still hang, the process exits 0 at nineteen twentieths of
// the grace with what was not closed left as it is. An uncaught exception does the same,
// then exits 1.
closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log, skip: ['unhandledRejection'] }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else app.log.info({ signal }, 'shutting down')
  const cut = setTimeout(() => {
    app.log.warn('shutting down: cutting the connections still busy')
    app.server.closeAllConnections()
  }, Math.floor(config.SHUTDOWN_GRACE_MS * 0.8))
  let last: NodeJS.Timeout | undefined
  const closed = await Promise.race([
    app.close().then(() => true),
    new Promise<false>((resolve) => (last = setTimeout(() => resolve(false), Math.floor(config.SHUTDOWN_GRACE_MS * 0.95))))
  ]).finally(() => {
    clearTimeout(cut)
    clearTimeout(last)
  })
  app.log[closed ? 'info' : 'warn'](closed ? 'shut down' : 'shut down: the close did not finish within the grace; exiting with it unfinished')
})

try {
  await app.listen({ port: config.PORT, host: config.HOST })
} catch (err) {
  await app.close().catch(() => {})
  const code = (err as NodeJS.ErrnoException).code
  if (code === 'EADDRINUSE') fail(`port ${config.PORT} on ${config.HOST} is already in use (set PORT or HOST)`)
  if (code === 'EADDRNOTAVAIL') fail(`cannot listen on ${config.HOST}: no such address on this machine (set HOST)`)
  throw err
}
app.log.info(config.ALLOW_DEV_ORG
  ? 'dev org: on, for callers on this machine (loopback) only; requests without credentials act in the dev org (ALLOW_DEV_ORG=false turns it off)'
  : 'dev org: off; every request needs a session or an API key')
app.log.info(describeListening(config.HOST, (app.server.address() as { port: number }).port))
