import { connect } from 'node:net'
import type { FastifyBaseLogger } from 'fastify'
import type { WebSocket } from 'ws'
import { SandboxError, type SandboxKey, type SandboxManager } from './sandbox.js'
import { bridgeSocket } from './socket-bridge.js'

/**
 * websockify: binary WebSocket frames to and from the sandbox's VNC server (a unix socket or raw TCP),
 * so noVNC connects unchanged. The target comes only from the sandbox provider.
 */
export function bridgeDesktop(
  socket: WebSocket,
  sandboxes: SandboxManager,
  key: SandboxKey,
  log: FastifyBaseLogger
): Promise<void> {
  return bridgeSocket({
    socket,
    sandboxes,
    key,
    log,
    what: 'desktop',
    async start(sandbox, send) {
      let endpoint
      try {
        endpoint = await sandbox.desktop()
      } catch (err) {
        const reason = err instanceof SandboxError ? err.message : 'the desktop could not start'
        if (!(err instanceof SandboxError)) log.warn({ err }, 'desktop: could not start')
        // a close reason is at most 123 bytes
        if (socket.readyState === socket.OPEN) socket.close(1011, reason.slice(0, 120))
        return null
      }
      const vnc = 'path' in endpoint ? connect(endpoint.path) : connect(endpoint.port, endpoint.host)
      if (!('path' in endpoint)) vnc.setNoDelay(true)
      vnc.on('data', send)
      vnc.on('error', (err) => {
        log.warn({ err }, 'desktop: VNC connection failed')
        if (socket.readyState === socket.OPEN) socket.close(1011, 'desktop connection failed')
      })
      vnc.on('close', () => {
        if (socket.readyState === socket.OPEN) socket.close(1000, 'desktop closed')
      })
      return {
        receive: (data) => void vnc.write(data),
        pause: () => void vnc.pause(),
        resume: () => void vnc.resume(),
        stop: () => void vnc.destroy()
      }
    }
  })
}
