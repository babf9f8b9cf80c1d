// The reference for serving artifact bytes: @fastify/static serving a file from disk
// (STATIC_ROOT), with nothing else in the way.
import fastifyStatic from '@fastify/static'
import Fastify from 'fastify'

const app = Fastify({ logger: { level: process.env.LOG_LEVEL ?? 'warn' } })
await app.register(fastifyStatic, { root: process.env.STATIC_ROOT! })
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
