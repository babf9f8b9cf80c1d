// A local OpenAI-compatible model for the benchmarks: `GET /v1/models` lists `bench-model`,
// and each chat completion is answered, streamed, with what `answer` says for its body (one
// chunk per delta, then the usage), at once. `answer` also gets the time the request began
// to arrive, for benchmarks that measure until the model is asked.
import { once } from 'node:events'
import { createServer } from 'node:http'

export interface BenchModelRequest {
  messages: Array<{ role: string; content: string | null }>
}

/** One streamed piece of the answer: its delta and, on the last, why it ends. */
export interface BenchModelChunk {
  delta: Record<string, unknown>
  finish?: 'stop' | 'tool_calls'
}

export const now = () => performance.timeOrigin + performance.now()

/** The value at `p` percent of `values` (nearest rank). */
export const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

export async function startBenchModel(
  answer: (body: BenchModelRequest, arrived: number) => BenchModelChunk[],
  o: { delayMs?: number; inFlight?: { now: number; max: number } } = {}
): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer(async (req, res) => {
    const arrived = now()
    let raw = ''
    for await (const chunk of req) raw += chunk
    if (req.method !== 'GET' && o.delayMs) {
      // a model that thinks: the answer starts after delayMs
      const gauge = o.inFlight
      if (gauge) gauge.max = Math.max(gauge.max, ++gauge.now)
      await new Promise((resolve) => setTimeout(resolve, o.delayMs))
      if (gauge) gauge.now--
    }
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          object: 'list',
          data: [{ id: 'bench-model', object: 'model', created: 0, owned_by: 'bench' }]
        })
      )
      return
    }
    const chunk = (fields: Record<string, unknown>) =>
      res.write(
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: 'bench-model', ...fields })}\n\n`
      )
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    for (const { delta, finish } of answer(JSON.parse(raw) as BenchModelRequest, arrived))
      chunk({ choices: [{ index: 0, delta, finish_reason: finish ?? null }] })
    chunk({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } })
    res.end('data: [DONE]\n\n')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  return { url: `http://127.0.0.1:${port}/v1`, close: () => new Promise((resolve) => server.close(() => resolve())) }
}
