import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import { buildApp } from './app.js'
import { ConfigError, loadConfig, type Config } from './config.js'
import { describeListening, startFailure } from './startup.js'

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

// SIGTERM/SIGINT: stop accepting, let in-flight requests finish, close the database.
closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
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
