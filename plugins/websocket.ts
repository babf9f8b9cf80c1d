import type { WebsocketPluginOptions } from '@fastify/websocket'
import type { FastifyInstance } from 'fastify'

/**
 * The options `@fastify/websocket` is registered with (terminals and desktops): `buildApp`
 * and a test of the runtime group alone (test/runtime/group.ts) register it alike.
 */
export function websocketOptions(maxMessageBytes: number): WebsocketPluginOptions {
  return {
    // at shutdown sockets close with 1012 (service restart): a client reconnects, to another
    // instance or to this one restarted; the default close sends no code at all
    preClose(this: FastifyInstance, done: () => void) {
      for (const client of this.websocketServer.clients) client.close(1012, 'the server is restarting; reconnect')
      this.websocketServer.close()
      done()
    },
    options: {
      // ws closes a socket with 1009 when a message is larger
      maxPayload: maxMessageBytes,
      // noVNC asks for `binary`; other clients ask for nothing
      handleProtocols: (protocols: Set<string>) => (protocols.has('binary') ? 'binary' : false)
    }
  }
}
