// A child process holding many SSE clients on /api/runs/changes. It reports, for each run
// id it sees, the time (ms since the epoch, sub-ms precision) at which its last client got it.
import { Agent, request } from 'node:http'

const [url, countArg] = process.argv.slice(2)
const count = Number(countArg)
const agent = new Agent({ keepAlive: false, maxSockets: Infinity })
const seen = new Map<string, number>()
const now = () => performance.timeOrigin + performance.now()
let open = 0

function connect(): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(url!, { agent, headers: { accept: 'text/event-stream' } }, (res) => {
      res.setEncoding('utf8')
      let buffer = ''
      res.on('data', (chunk: string) => {
        buffer += chunk
        let cut: number
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, cut)
          buffer = buffer.slice(cut + 2)
          const at = block.indexOf('"id":"')
          if (at < 0) continue
          const id = block.slice(at + 6, block.indexOf('"', at + 6))
          const n = (seen.get(id) ?? 0) + 1
          seen.set(id, n)
          if (n === count) process.send!({ id, doneAt: now() })
        }
      })
      res.on('close', () => open--)
      open++
      resolve()
    })
    req.on('error', reject)
    req.end()
  })
}

for (let i = 0; i < count; i += 200) {
  await Promise.all(Array.from({ length: Math.min(200, count - i) }, connect))
}
process.send!({ ready: open })
process.on('message', (m: { exit?: boolean }) => {
  if (m.exit) process.exit(0)
})
