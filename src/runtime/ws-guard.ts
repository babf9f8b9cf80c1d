import type { FastifyRequest } from 'fastify'
import { forbiddenOrigin } from '../../plugins/errors.js'

/**
 * Cross-site WebSocket hijacking guard: browsers always send `Origin` on a WebSocket
 * handshake, and cookies ride along, so a foreign page must not open our sockets.
 * Allowed: no Origin (not a browser), our own origin (scheme and Host of this
 * request), or one listed in CORS_ORIGINS. Checked before the upgrade.
 */
export function assertSameOrigin(request: FastifyRequest, corsOrigins: readonly string[]): void {
  const origin = request.headers.origin
  if (origin === undefined) return
  if (origin === `${request.protocol}://${request.host}` || corsOrigins.includes(origin)) return
  throw forbiddenOrigin('this origin may not open a socket here')
}
