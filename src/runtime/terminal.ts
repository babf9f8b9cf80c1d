import type { FastifyBaseLogger } from 'fastify'
import { Value } from 'typebox/value'
import type { WebSocket } from 'ws'
import { TerminalControl } from '../../schemas/runtime.js'
import type { SandboxKey, SandboxManager } from './sandbox.js'
import { bridgeSocket } from './socket-bridge.js'
import type { WorkspaceSession } from './workspaces.js'

/** The longest a WebSocket close reason may be (RFC 6455: 123 bytes). */
const MAX_REASON = 123

/**
 * Bridges a WebSocket to a shell on a PTY in the thread's sandbox. Binary frames carry
 * terminal bytes both ways; text frames carry JSON control messages (`resize`). The PTY
 * ends with the socket, and the socket closes when the PTY exits or the sandbox goes.
 */
export function bridgeTerminal(
  socket: WebSocket,
  sandboxes: SandboxManager,
  key: SandboxKey,
  log: FastifyBaseLogger,
  session: WorkspaceSession | null = null
): Promise<void> {
  let exited: Promise<void> = Promise.resolve()
  // the session ends (its workspace saved) once the shell is gone, whoever ended it
  const endSession = async (): Promise<string | null> => {
    if (!session) return null
    await exited
    const outcome = await session.close()
    if (outcome.error)
      log.warn({ threadId: key.threadId, error: outcome.error }, 'terminal: the workspace was not saved')
    return outcome.error
  }
  socket.once(
    'close',
    () => void endSession().catch((err: unknown) => log.warn({ err }, 'terminal: ending the workspace session failed'))
  )
  return bridgeSocket({
    socket,
    sandboxes,
    key,
    log,
    what: 'terminal',
    start(sandbox, send) {
      let term: ReturnType<typeof sandbox.spawnPty>
      try {
        term = sandbox.spawnPty({ cols: 80, rows: 24 })
      } catch (err) {
        log.warn({ err }, 'terminal: could not start a shell')
        socket.close(1011, 'could not start a shell')
        return null
      }
      // a client that does not read stops the shell's output, not the server
      term.onData((data) => send(Buffer.from(data, 'utf8')))
      exited = new Promise((resolve) => term.onExit(() => resolve()))
      let closing = false
      term.onExit(() => {
        if (socket.readyState !== socket.OPEN) return
        closing = true
        // the shell ended here: the client hears whether its files were kept (4413 when they were not)
        void endSession().then(
          (error) => {
            if (socket.readyState !== socket.OPEN) return
            if (error === null) socket.close(1000, 'terminal exited')
            else
              socket.close(
                4413,
                Buffer.from(error, 'utf8')
                  .subarray(0, MAX_REASON)
                  .toString('utf8')
                  .replace(/\uFFFD$/, '')
              )
          },
          () => socket.close(1000, 'terminal exited')
        )
      })
      return {
        receive(data, isBinary) {
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
        },
        pause: () => term.pause(),
        resume: () => term.resume(),
        closing: () => closing,
        stop() {
          // SIGHUP first, as a closed terminal would: bash hangs up its background jobs
          // too; then SIGKILL for whatever ignored it (inside bubblewrap the whole
          // namespace goes)
          signal(term, 'SIGHUP')
          setTimeout(() => signal(term, 'SIGKILL'), 1000).unref()
        }
      }
    }
  })
}

function signal(term: { kill(signal?: string): void }, name: string): void {
  try {
    term.kill(name)
  } catch {
    // already gone
  }
}
