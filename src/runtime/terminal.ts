import type { FastifyBaseLogger } from 'fastify'
import { Value } from 'typebox/value'
import type { WebSocket } from 'ws'
import { TerminalControl } from '../../schemas/runtime.js'
import type { SandboxKey, SandboxManager } from './sandbox.js'

const HIGH_WATER = 1024 * 1024
const LOW_WATER = 256 * 1024

/**
 * Bridges a WebSocket to a shell on a PTY in the thread's sandbox. Binary frames carry
 * terminal bytes both ways; text frames carry JSON control messages (`resize`). The PTY
 * ends with the socket, and the socket closes when the PTY exits or the sandbox goes.
 */
export async function bridgeTerminal(socket: WebSocket, sandboxes: SandboxManager, key: SandboxKey, log: FastifyBaseLogger): Promise<void> {
  // frames that arrive while the sandbox starts are kept, in order
  const early: Array<{ data: Buffer; isBinary: boolean }> = []
  let handle: ((data: Buffer, isBinary: boolean) => void) | null = null
  socket.on('message', (data: Buffer, isBinary) => {
    if (handle) handle(data, isBinary)
    else early.push({ data, isBinary })
  })
  let closed = false
  socket.once('close', () => {
    closed = true
  })

  let lease: Awaited<ReturnType<SandboxManager['acquire']>>
  try {
    lease = await sandboxes.acquire(key)
  } catch (err) {
    log.warn({ err }, 'terminal: sandbox unavailable')
    socket.close(1011, 'sandbox unavailable')
    return
  }
  if (closed) {
    lease.release()
    return
  }
  const { sandbox, release } = lease
  let term: ReturnType<typeof sandbox.spawnPty>
  try {
    term = sandbox.spawnPty({ cols: 80, rows: 24 })
  } catch (err) {
    release()
    log.warn({ err }, 'terminal: could not start a shell')
    socket.close(1011, 'could not start a shell')
    return
  }

  let paused = false
  term.onData((data) => {
    if (socket.readyState !== socket.OPEN) return
    socket.send(Buffer.from(data, 'utf8'), { binary: true }, () => {
      if (paused && socket.bufferedAmount < LOW_WATER) {
        paused = false
        term.resume()
      }
    })
    if (!paused && socket.bufferedAmount > HIGH_WATER) {
      // a client that does not read stops the shell's output, not the server
      paused = true
      term.pause()
    }
  })
  term.onExit(() => {
    if (socket.readyState === socket.OPEN) socket.close(1000, 'terminal exited')
  })
  const unsubscribe = sandbox.onDestroy(() => {
    if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING) socket.close(1001, 'sandbox stopped')
  })

  handle = (data, isBinary) => {
    if (isBinary) {
      term.write(data)
      return
    }
    let message: unknown
    try {
      message = JSON.parse(data.toString('utf8'))
    } catch {
      return
    }
    if (Value.Check(TerminalControl, message)) term.resize(message.cols, message.rows)
  }
  for (const frame of early.splice(0)) handle(frame.data, frame.isBinary)

  const finish = () => {
    unsubscribe()
    // SIGHUP first, as a closed terminal would: bash hangs up its background jobs too;
    // then SIGKILL for whatever ignored it (inside bubblewrap the whole namespace goes)
    signal(term, 'SIGHUP')
    setTimeout(() => signal(term, 'SIGKILL'), 1000).unref()
    release()
  }
  if (closed) finish()
  else socket.once('close', finish)
}

function signal(term: { kill(signal?: string): void }, name: string): void {
  try {
    term.kill(name)
  } catch {
    // already gone
  }
}
