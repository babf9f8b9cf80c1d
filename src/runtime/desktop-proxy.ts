import { connect } from 'node:net'
import type { FastifyBaseLogger } from 'fastify'
import type { WebSocket } from 'ws'
import { SandboxError, type SandboxKey, type SandboxManager } from './sandbox.js'

const HIGH_WATER = 1024 * 1024
const LOW_WATER = 256 * 1024

/**
 * websockify: binary WebSocket frames to and from the sandbox's VNC server (raw TCP),
 * so noVNC connects unchanged. The target comes only from the sandbox provider.
 */
export async function bridgeDesktop(socket: WebSocket, sandboxes: SandboxManager, key: SandboxKey, log: FastifyBaseLogger): Promise<void> {
  const early: Buffer[] = []
  let forward: ((data: Buffer) => void) | null = null
  socket.on('message', (data: Buffer) => {
    if (forward) forward(data)
    else early.push(data)
  })
  let closed = false
  socket.once('close', () => {
    closed = true
  })

  let lease: Awaited<ReturnType<SandboxManager['acquire']>>
  try {
    lease = await sandboxes.acquire(key)
  } catch (err) {
    log.warn({ err }, 'desktop: sandbox unavailable')
    socket.close(1011, 'sandbox unavailable')
    return
  }
  const { sandbox, release } = lease
  let endpoint
  try {
    endpoint = await sandbox.desktop()
  } catch (err) {
    release()
    const reason = err instanceof SandboxError ? err.message : 'the desktop could not start'
    if (!(err instanceof SandboxError)) log.warn({ err }, 'desktop: could not start')
    // a close reason is at most 123 bytes
    if (socket.readyState === socket.OPEN) socket.close(1011, reason.slice(0, 120))
    return
  }
  if (closed) {
    release()
    return
  }

  const tcp = connect(endpoint.port, endpoint.host)
  tcp.setNoDelay(true)
  let paused = false
  tcp.on('data', (chunk) => {
    if (socket.readyState !== socket.OPEN) return
    socket.send(chunk, { binary: true }, () => {
      if (paused && socket.bufferedAmount < LOW_WATER) {
        paused = false
        tcp.resume()
      }
    })
    if (!paused && socket.bufferedAmount > HIGH_WATER) {
      paused = true
      tcp.pause()
    }
  })
  tcp.on('error', (err) => {
    log.warn({ err }, 'desktop: VNC connection failed')
    if (socket.readyState === socket.OPEN) socket.close(1011, 'desktop connection failed')
  })
  tcp.on('close', () => {
    if (socket.readyState === socket.OPEN) socket.close(1000, 'desktop closed')
  })
  const unsubscribe = sandbox.onDestroy(() => {
    if (socket.readyState === socket.OPEN) socket.close(1001, 'sandbox stopped')
  })
  forward = (data) => {
    tcp.write(data)
  }
  for (const data of early.splice(0)) forward(data)
  const finish = () => {
    unsubscribe()
    tcp.destroy()
    release()
  }
  if (closed) finish()
  else socket.once('close', finish)
}
