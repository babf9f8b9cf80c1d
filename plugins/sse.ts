import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { invalidLastEventId } from './errors.js'

export interface SseOptions {
  heartbeatMs: number
  /** a client that leaves more than this unread is dropped instead of buffered */
  maxBufferBytes: number
  /** a client that takes no byte for this long while output waits is dropped */
  stallMs: number
}

/** One open event stream. Writes are fire-and-forget; a slow client is cut off. */
export interface SseStream {
  readonly closed: boolean
  /** the `Last-Event-ID` the client sent (a non-negative integer), or null */
  readonly lastEventId: number | null
  /** writes an already formatted frame (see `sseFrame`) */
  write(frame: string): boolean
  close(): void
  onClose(fn: () => void): void
}

export interface SseOpenOptions {
  /**
   * what the stream gets before it closes at shutdown, instead of SHUTDOWN_FRAME (a stream that cannot be resumed says
   * it ended)
   */
  shutdownFrame?: string
}

export interface SseHelper {
  open(request: FastifyRequest, reply: FastifyReply, options?: SseOpenOptions): SseStream
  /** open streams on this instance */
  readonly count: number
}

declare module 'fastify' {
  interface FastifyInstance {
    sse: SseHelper
  }
}

/** What a stream gets before it closes at shutdown: a comment, and when to reconnect (ms). */
export const SHUTDOWN_FRAME = ': shutting down; reconnect with Last-Event-ID\nretry: 1000\n\n'

/**
 * What a stream that cannot be resumed (a chat's tokens are not stored) gets at shutdown:
 * `event: end` saying why, and when to send the request again (ms), to any instance.
 */
export const SHUTDOWN_END_FRAME = `event: end\ndata: ${JSON.stringify({ reason: 'shutting_down', message: 'the server is shutting down; send the request again' })}\nretry: 1000\n\n`

/** `id:`/`event:`/`data:` frame; data is one line of JSON. */
export function sseFrame(event: string, data: string, id?: number | string): string {
  return id === undefined ? `event: ${event}\ndata: ${data}\n\n` : `id: ${id}\nevent: ${event}\ndata: ${data}\n\n`
}

/** Parses `Last-Event-ID`: absent → null; a non-negative integer → it; anything else → 400. */
export function parseLastEventId(request: FastifyRequest): number | null {
  const raw = request.headers['last-event-id']
  if (raw === undefined || raw === '') return null
  const value = Array.isArray(raw) ? raw[0] : raw
  if (value === undefined || !/^\d{1,15}$/.test(value.trim())) {
    throw invalidLastEventId()
  }
  return Number(value.trim())
}

/**
 * The bytes of one frame: as an HTTP/1.1 chunk (`<hex length>\r\n<frame>\r\n`), or bare
 * when the body is not chunked (an HTTP/1.0 client reads to the close). A fan-out writes
 * the same frame to thousands of streams in a row, so the last one is kept: the string is
 * encoded once, not once per client.
 */
const CRLF = Buffer.from('\r\n', 'latin1')
let lastFrame = ''
let lastBody = Buffer.alloc(0)
let lastChunk: Buffer | null = null
function bytesOf(frame: string, chunked: boolean): Buffer {
  if (frame !== lastFrame) {
    lastBody = Buffer.from(frame, 'utf8')
    lastChunk = null
    lastFrame = frame
  }
  if (!chunked) return lastBody
  return (lastChunk ??= Buffer.concat([Buffer.from(`${lastBody.length.toString(16)}\r\n`, 'latin1'), lastBody, CRLF]))
}

class Stream implements SseStream {
  closed = false
  readonly lastEventId: number | null
  private readonly raw: ServerResponse
  private readonly socket: Socket
  /** the response body is chunked (HTTP/1.1), so each frame is sent as a chunk */
  private readonly chunked: boolean
  private readonly max: number
  private readonly owner: Set<Stream>
  /** written at shutdown before the close */
  readonly shutdownFrame: string
  private listeners: Array<() => void> | null = null
  /** bytes given to the socket by write(); minus what it still holds, the bytes the kernel took */
  private given = 0
  private taken = 0
  /** the last stall check that found the socket empty or taking bytes */
  private fineAt: number

  constructor(
    raw: ServerResponse,
    socket: Socket,
    lastEventId: number | null,
    max: number,
    owner: Set<Stream>,
    now: number,
    shutdownFrame: string
  ) {
    this.fineAt = now
    this.shutdownFrame = shutdownFrame
    this.raw = raw
    this.socket = socket
    this.chunked = (raw as ServerResponse & { chunkedEncoding: boolean }).chunkedEncoding
    this.lastEventId = lastEventId
    this.max = max
    this.owner = owner
  }

  /**
   * Frames go straight to the socket as ready-made chunks of the response's body: one
   * buffer, one write, no per-client encoding. Node's ServerResponse would encode the
   * string and cork, frame and uncork for each client, about half the cost of a fan-out.
   * The response's own bytes (headers, `:ok`, the final chunk at `end()`) go to the same
   * socket in order, so the framing stays valid.
   */
  write(frame: string): boolean {
    if (this.closed) return false
    // backpressure: what the kernel would not take stays in Node's buffer; past the
    // limit the client is not reading, so it is dropped rather than buffered forever
    if (this.socket.writableLength > this.max) {
      this.drop()
      return false
    }
    const bytes = bytesOf(frame, this.chunked)
    this.given += bytes.length
    this.socket.write(bytes)
    return true
  }

  /**
   * The kernel's buffers (about 4 MB per stream on loopback here) hide a reader that stopped:
   * writes succeed until they are full, and only then does Node start holding bytes. A
   * stream whose socket holds bytes and has taken none since `fineAt` is dropped once that
   * is `limit` old, so no reader pins its buffers for longer than the stall limit.
   */
  checkStall(now: number, limit: number): void {
    const waiting = this.socket.writableLength
    const taken = this.given - waiting
    if (waiting === 0 || taken !== this.taken) {
      this.taken = taken
      this.fineAt = now
    } else if (now - this.fineAt >= limit) {
      this.drop()
    }
  }

  drop(): void {
    this.raw.destroy()
    this.finish()
  }

  close(): void {
    if (this.closed) return
    this.raw.end()
    this.finish()
  }

  onClose(fn: () => void): void {
    if (this.closed) {
      fn()
      return
    }
    ;(this.listeners ??= []).push(fn)
  }

  finish(): void {
    if (this.closed) return
    this.closed = true
    this.owner.delete(this)
    const listeners = this.listeners
    this.listeners = null
    if (listeners) for (const fn of listeners) fn()
  }
}

/**
 * The one way to answer with server-sent events: headers, heartbeats (one timer for all
 * streams), backpressure, Last-Event-ID parsing, cleanup on close and at shutdown.
 */
export default fp(
  async function ssePlugin(app: FastifyInstance, opts: SseOptions) {
    const streams = new Set<Stream>()
    const heartbeat = setInterval(() => {
      for (const stream of streams) stream.write(':hb\n\n')
    }, opts.heartbeatMs)
    heartbeat.unref()
    // checked ten times per limit; a stall is at most one check old when first seen, so a
    // stream is dropped after between 0.8 and 1.0 times the limit without a byte taken
    const every = Math.max(5, Math.floor(opts.stallMs / 10))
    const limit = opts.stallMs - every
    const stallCheck = setInterval(() => {
      const at = Date.now()
      for (const stream of streams) stream.checkStall(at, limit)
    }, every)
    stallCheck.unref()

    const helper: SseHelper = {
      get count() {
        return streams.size
      },
      open(request, reply, options) {
        const lastEventId = parseLastEventId(request)
        reply.hijack()
        const raw = reply.raw
        const headers: Record<string, string | number | string[]> = {}
        for (const [name, value] of Object.entries(reply.getHeaders()))
          if (value !== undefined) headers[name] = value as string
        raw.writeHead(200, {
          ...headers,
          'content-type': 'text/event-stream; charset=utf-8',
          'cache-control': 'no-cache',
          'x-accel-buffering': 'no',
          connection: 'keep-alive'
        })
        // the first comment flushes the headers so clients see the stream open at once
        raw.write(':ok\n\n')
        const socket = request.raw.socket
        socket.setNoDelay(true)
        const stream = new Stream(
          raw,
          socket,
          lastEventId,
          opts.maxBufferBytes,
          streams,
          Date.now(),
          options?.shutdownFrame ?? SHUTDOWN_FRAME
        )
        streams.add(stream)
        raw.on('close', () => stream.finish())
        raw.on('error', () => stream.finish())
        return stream
      }
    }
    app.decorate('sse', helper)

    // open streams would keep server.close() waiting forever. Each ends cleanly with a
    // reconnectable close: `retry:` tells an EventSource when to come back, and it resumes
    // with Last-Event-ID (on another instance, or this one restarted). Not `event: end`,
    // which says that a run is over and nothing more will come; a stream that cannot be
    // resumed (a chat) gets its own frame instead, `event: end` with why.
    app.addHook('preClose', async () => {
      clearInterval(heartbeat)
      clearInterval(stallCheck)
      for (const stream of [...streams]) {
        stream.write(stream.shutdownFrame)
        stream.close()
      }
    })
  },
  { name: 'sse', fastify: '5.x', dependencies: ['errors', 'shutdown-refusals'] }
)
