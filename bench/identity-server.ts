// The real service plus one trivial read route a key may call (GET /api/bench/projects), so the
// cost of resolving a principal is measured on its own.
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'

const page = { items: [], nextCursor: null }
const app = await buildApp({
  config: loadConfig(),
  apiPlugins: [
    async (api) => {
      api.get('/bench/projects', { config: { keyAccess: 'read' } }, async () => page)
    }
  ]
})
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
