import type { FastifyBaseLogger } from 'fastify'
import type { WebSocket } from 'ws'
import type { Sandbox, SandboxKey, SandboxManager } from './sandbox.js'

const HIGH_WATER = 1024 * 1024
const LOW_WATER = 256 * 1024

/** What the terminal and the desktop proxy bridge a WebSocket to: bytes out, bytes in. */
export interface BridgeTarget {
  /** handles one client frame */
  receive(data: Buffer, isBinary: boolean): void
  /** the client is not reading: stop producing output for now */
  pause(): void
  resume(): void
  /** stops what the target started (the socket is gone) */
  stop(): void
  /** true once the target closes the socket itself after the sandbox stops (a terminal saving its workspace) */
  closing?(): boolean
}

export interface BridgeOptions {
  socket: WebSocket
  sandboxes: SandboxManager
  key: SandboxKey
  log: FastifyBaseLogger
  /** `terminal` or `desktop`, for log lines */
  what: string
  /**
   * Starts the target in the acquired sandbox. Return null (having closed the socket
   * with a reason) when it cannot start; the lease is then released here.
   */
  start(sandbox: Sandbox, send: (chunk: Buffer) => void): Promise<BridgeTarget | null> | BridgeTarget | null
}

/**
 * The life of one bridged socket, shared by the terminal and the desktop proxy: frames
 * that arrive while the sandbox starts are kept in order; a sandbox that cannot be had
 * closes the socket with 1011; output to a client that does not read pauses its source
 * (above 1 MiB buffered, resumed under 256 KiB) instead of filling the server's memory;
 * the socket closes with 1001 when the sandbox goes; and when the socket closes, the
 * target stops and the sandbox lease is released.
 */
export async function bridgeSocket(o: BridgeOptions): Promise<void> {
  const { socket, log } = o
  const early: Array<{ data: Buffer; isBinary: boolean }> = []
  let target: BridgeTarget | null = null
  socket.on('message', (data: Buffer, isBinary: boolean) => {
    if (target) target.receive(data, isBinary)
    else early.push({ data, isBinary })
  })
  let closed = false
  socket.once('close', () => {
    closed = true
  })

  let lease: Awaited<ReturnType<SandboxManager['acquire']>>
  try {
    lease = await o.sandboxes.acquire(o.key)
  } catch (err) {
    log.warn({ err }, `${o.what}: sandbox unavailable`)
    socket.close(1011, 'sandbox unavailable')
    return
  }
  const { sandbox, release } = lease
  if (closed) {
    release()
    return
  }

  let paused = false
  const send = (chunk: Buffer) => {
    if (socket.readyState !== socket.OPEN) return
    socket.send(chunk, { binary: true }, () => {
      if (paused && socket.bufferedAmount < LOW_WATER) {
        paused = false
        target?.resume()
      }
    })
    if (!paused && socket.bufferedAmount > HIGH_WATER) {
      paused = true
      target?.pause()
    }
  }

  // from here on frames go to the target; the early ones are replayed below, before any
  // later one can arrive (nothing in between waits)
  try {
    target = await o.start(sandbox, send)
  } catch (err) {
    log.warn({ err }, `${o.what}: could not start`)
    if (socket.readyState === socket.OPEN) socket.close(1011, `the ${o.what} could not start`)
  }
  if (!target) {
    release()
    return
  }
  const running = target
  const unsubscribe = sandbox.onDestroy(() => {
    if (running.closing?.()) return
    if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING)
      socket.close(1001, 'sandbox stopped')
  })
  const finish = () => {
    unsubscribe()
    running.stop()
    release()
  }
  if (closed) {
    finish()
    return
  }
  for (const frame of early.splice(0)) running.receive(frame.data, frame.isBinary)
  socket.once('close', finish)
}
