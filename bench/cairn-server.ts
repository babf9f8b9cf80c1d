// The real service, built from source by tsx, listening on PORT (0: any free port).
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'

const app = await buildApp({ config: loadConfig() })
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
