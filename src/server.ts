import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { ConfigError, loadConfig } from './config.js'
import { isDatabaseUnavailable } from './db/faults.js'

let config
try {
  config = loadConfig()
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  process.stderr.write(`cairn: ${err.message}\n`)
  process.exit(1)
}

const app = await buildApp({ config })

// A rejection nobody awaited that only says the database is away must not end the
// process (contract 1.3): the pool and LISTEN reconnect by themselves. Any other one is
// rethrown as an uncaught exception, which shuts down gracefully below.
process.on('unhandledRejection', (reason) => {
  if (!isDatabaseUnavailable(reason)) throw reason
  app.log.error({ err: reason }, 'unawaited database failure (the database is unavailable; not fatal)')
})

// SIGTERM/SIGINT: stop accepting, let in-flight requests finish, close the database.
// An uncaught exception does the same, then exits 1.
closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log, skip: ['unhandledRejection'] }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
})

await app.listen({ port: config.PORT, host: config.HOST })
