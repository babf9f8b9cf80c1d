// The service with a document extraction that never finishes, for the kill test: a
// document claimed here stays `processing` until this process is killed.
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'

const app = await buildApp({ config: loadConfig(), ports: { knowledgeExtractor: () => new Promise<string>(() => {}) } })
await app.listen({ port: 0, host: '127.0.0.1' })
const { port } = app.server.address() as { port: number }
process.stdout.write(`API at http://127.0.0.1:${port}/api\n`)
