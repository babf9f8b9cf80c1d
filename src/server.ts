import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.js'
import { ConfigError, loadConfig, type Config } from './config.js'
import { closeOnSignals, describeListening, startFailure } from './startup.js'
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
// process: the pool and LISTEN reconnect by themselves. Any other one is
// rethrown as an uncaught exception, which shuts down gracefully below.
process.on('unhandledRejection', (reason) => {
  if (!isDatabaseUnavailable(reason)) throw reason
  app.log.error({ err: reason }, 'unawaited database failure (the database is unavailable; not fatal)')
})

// SIGTERM/SIGINT: a graceful close within SHUTDOWN_GRACE_MS, exiting 0 (src/startup.ts)
closeOnSignals(app, config.SHUTDOWN_GRACE_MS)

try {
  await app.listen({ port: config.PORT, host: config.HOST })
} catch (err) {
  await app.close().catch(() => {})
  const code = (err as NodeJS.ErrnoException).code
  if (code === 'EADDRINUSE') fail(`port ${config.PORT} on ${config.HOST} is already in use (set PORT or HOST)`)
  if (code === 'EADDRNOTAVAIL') fail(`cannot listen on ${config.HOST}: no such address on this machine (set HOST)`)
  throw err
}
app.log.info(
  config.ALLOW_DEV_ORG
    ? 'dev org: on, for callers on this machine (loopback) only; requests without credentials act in the dev org (ALLOW_DEV_ORG=false turns it off)'
    : 'dev org: off; every request needs a session or an API key'
)
app.log.info(describeListening(config.HOST, (app.server.address() as { port: number }).port))
