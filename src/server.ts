import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { ConfigError, loadConfig } from './config.js'

let config
try {
  config = loadConfig()
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  process.stderr.write(`cairn: ${err.message}\n`)
  process.exit(1)
}

const app = await buildApp({ config })

// SIGTERM/SIGINT: stop accepting, let in-flight requests finish, close the database.
closeWithGrace({ delay: config.SHUTDOWN_GRACE_MS, logger: app.log }, async ({ signal, err }) => {
  if (err) app.log.error({ err }, 'shutting down after an error')
  else app.log.info({ signal }, 'shutting down')
  await app.close()
})

await app.listen({ port: config.PORT, host: config.HOST })
