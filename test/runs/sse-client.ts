import { request, type IncomingMessage, type ClientRequest } from 'node:http'

export interface Frame {
  id?: string
  event: string
  data: string
}

/** A streaming SSE client over node:http (a real socket, not inject). */
export class SseClient {
  frames: Frame[] = []
  comments: string[] = []
  /** the last `retry:` the server sent (ms), or null */
  retry: number | null = null
  status = 0
  headers: IncomingMessage['headers'] = {}
  ended = false
  private buffer = ''
  private waiters: Array<() => void> = []
  private req: ClientRequest | null = null
  private res: IncomingMessage | null = null

  static async open(
    url: string,
    opts: { headers?: Record<string, string>; method?: string; body?: string } = {}
  ): Promise<SseClient> {
    const client = new SseClient()
    await new Promise<void>((resolve, reject) => {
      const req = request(
        url,
        { method: opts.method ?? 'GET', headers: { accept: 'text/event-stream', ...opts.headers } },
        (res) => {
          client.res = res
          client.status = res.statusCode ?? 0
          client.headers = res.headers
          res.setEncoding('utf8')
          res.on('data', (chunk: string) => client.feed(chunk))
          res.on('end', () => client.finish())
          res.on('close', () => client.finish())
          res.on('error', () => client.finish())
          resolve()
        }
      )
      client.req = req
      req.on('error', (err) => {
        client.finish()
        reject(err)
      })
      if (opts.body !== undefined) {
        req.setHeader('content-type', 'application/json')
        req.end(opts.body)
      } else req.end()
    })
    return client
  }

  private feed(chunk: string) {
    this.buffer += chunk
    let cut: number
    while ((cut = this.buffer.indexOf('\n\n')) >= 0) {
      const block = this.buffer.slice(0, cut)
      this.buffer = this.buffer.slice(cut + 2)
      const frame: Frame = { event: 'message', data: '' }
      let isComment = true
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) {
          this.comments.push(line.slice(1))
          continue
        }
        const colon = line.indexOf(':')
        const field = line.slice(0, colon)
        const value = line.slice(colon + 1).replace(/^ /, '')
        // `retry:` alone sets the reconnection time; it is no event
        if (field === 'retry') {
          this.retry = Number(value)
          continue
        }
        isComment = false
        if (field === 'id') frame.id = value
        else if (field === 'event') frame.event = value
        else if (field === 'data') frame.data += value
      }
      if (!isComment) this.frames.push(frame)
    }
    this.notify()
  }

  private finish() {
    if (this.ended) return
    this.ended = true
    this.notify()
  }

  private notify() {
    const waiters = this.waiters
    this.waiters = []
    for (const w of waiters) w()
  }

  /** Waits until the predicate holds over what arrived (or the stream ended: then it throws if still false). */
  async until(predicate: (c: SseClient) => boolean, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    while (!predicate(this)) {
      if (this.ended)
        throw new Error(
          `stream ended before the condition held; frames: ${JSON.stringify(this.frames.map((f) => f.event))}`
        )
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`timed out; frames: ${JSON.stringify(this.frames.map((f) => [f.id, f.event]))}`)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 1000))
        this.waiters.push(() => {
          clearTimeout(timer)
          resolve()
        })
      })
    }
  }

  events(type?: string): Frame[] {
    return type ? this.frames.filter((f) => f.event === type) : this.frames
  }

  json(frame: Frame): Record<string, any> {
    return JSON.parse(frame.data)
  }

  lastId(): string | undefined {
    for (let i = this.frames.length - 1; i >= 0; i--) if (this.frames[i]!.id !== undefined) return this.frames[i]!.id
    return undefined
  }

  close(): void {
    this.req?.destroy()
    this.res?.destroy()
    this.finish()
  }

  pause(): void {
    this.res?.pause()
  }
}

/** Polls until fn returns a truthy value. */
export async function eventually<T>(fn: () => Promise<T | null | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await fn()
    if (value) return value
    if (Date.now() > deadline) throw new Error('condition never held')
    await new Promise((r) => setTimeout(r, 25))
  }
}
