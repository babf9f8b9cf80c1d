// The service whose capture deliveries never finish, for the kill -9 test: a capture it
// claims stays `delivering` under its lease until this process is killed. It says which
// captures it holds on stdout (`holding capture <id>`).
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { closeOnSignals } from '../../src/startup.js'

const config = loadConfig()
const app = await buildApp({ config })
const backend = app.memory.backend
if (!backend) throw new Error('hold-capture-server needs a memory backend')
const hold = (ids: string[]) => {
  for (const id of ids) process.stdout.write(`holding capture ${id}\n`)
  return new Promise<never>(() => {})
}
// the worker was handed this object: its deliveries now wait forever
backend.deliver = async (_pool, capture) => hold([capture.captureId])
if (backend.deliverBatch)
  backend.deliverBatch = async (batch) => hold([...new Set(batch.map((b) => b.capture.captureId))])
// SIGTERM closes it as the server does (src/server.ts)
closeOnSignals(app, config.SHUTDOWN_GRACE_MS)
await app.listen({ port: 0, host: '127.0.0.1' })
const { port } = app.server.address() as { port: number }
process.stdout.write(`API at http://127.0.0.1:${port}/api\n`)
