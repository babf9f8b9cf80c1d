// The baseline: a bare Node http server answering the same JSON as GET /api/health.
import { createServer } from 'node:http'

const body = JSON.stringify({ status: 'ok' })
const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) })
  res.end(body)
})
server.listen(0, '127.0.0.1', () => {
  const address = server.address()
  if (address && typeof address === 'object') process.stdout.write(`listening on http://127.0.0.1:${address.port}\n`)
})
process.on('SIGTERM', () => server.close(() => process.exit(0)))
