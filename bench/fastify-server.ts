// A reference, not a baseline: a plain Fastify app answering the same JSON as
// GET /api/health with no plugins or hooks, so the foundation bench shows how much of the
// gap to bare Node is Fastify itself and how much is ours.
import Fastify from 'fastify'

const app = Fastify({ logger: { level: process.env.LOG_LEVEL ?? 'warn' } })
app.get('/api/health', async () => ({ status: 'ok' }))
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
