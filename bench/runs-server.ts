// The real service for the runs benchmark: like cairn-server.ts, and on SIGUSR2 it
// collects garbage and prints its heap, so the bench can measure bytes per connection.
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config.js'

const app = await buildApp({ config: loadConfig() })
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1', backlog: 4096 })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGUSR2', () => {
  const gc = (globalThis as { gc?: () => void }).gc
  gc?.()
  gc?.()
  const m = process.memoryUsage()
  process.stdout.write(`heap ${m.heapUsed} rss ${m.rss} streams ${app.sse.count}\n`)
})
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
