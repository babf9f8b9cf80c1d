import { once } from 'node:events'
import { createConnection, createServer, type Socket } from 'node:net'
import { openDatabase } from '../../src/db/client.js'
import type { Teardown, TestDatabase } from '../helper.js'

/**
 * A TCP proxy in front of the test's Postgres: `cut()` resets every connection through it
 * and refuses new ones (the database went away), `restore()` lets them in again. Only the
 * service's own connections go through it; the test keeps a direct handle.
 */
export interface DatabaseProxy {
  /** the service's handle on the database, through the proxy */
  db: TestDatabase
  cut(): Promise<void>
  restore(): Promise<void>
}

export async function proxiedDatabase(t: Teardown, direct: TestDatabase): Promise<DatabaseProxy> {
  const target = new URL(direct.url!)
  const sockets = new Set<Socket>()
  const server = createServer((client) => {
    const upstream = createConnection({ host: target.hostname, port: Number(target.port || 5432) })
    for (const [a, b] of [
      [client, upstream],
      [upstream, client]
    ] as const) {
      sockets.add(a)
      a.on('error', () => b.destroy())
      a.on('close', () => {
        sockets.delete(a)
        b.destroy()
      })
      a.pipe(b)
    }
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  const url = new URL(direct.url!)
  url.host = `127.0.0.1:${port}`
  const database = await openDatabase({ url: url.toString(), poolMax: 5 })
  let open = true
  const cut = async () => {
    if (!open) return
    open = false
    const closed = new Promise((resolve) => server.close(resolve))
    for (const socket of sockets) socket.resetAndDestroy()
    await closed
  }
  t.teardown(async () => {
    await cut()
    await database.close().catch(() => {})
  })
  return {
    db: { database, url: url.toString() },
    cut,
    async restore() {
      if (open) return
      server.listen(port, '127.0.0.1')
      await once(server, 'listening')
      open = true
    }
  }
}
