import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Database, Db } from '../src/db/client.js'
import { startMaintenance } from '../src/db/maintenance.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** the database handle (driver kind, raw clients, ping) */
    database: Database
    /** the drizzle API over it */
    db: Db
  }
}

export interface DbPluginOptions {
  database: Database
  /** close the database when the app closes (false when the caller owns it, as tests do) */
  closeOnShutdown: boolean
  /** the embedded database's vacuum and analyze pass, every this many ms (0 or unset: none) */
  maintenanceEveryMs?: number
}

export default fp(
  async function dbPlugin(app: FastifyInstance, opts: DbPluginOptions) {
    app.decorate('database', opts.database)
    app.decorate('db', opts.database.db)
    // a real server runs autovacuum; PGlite has no background processes (src/db/maintenance.ts)
    const maintenance =
      opts.database.kind === 'pglite' && (opts.maintenanceEveryMs ?? 0) > 0
        ? startMaintenance(opts.database.db, opts.maintenanceEveryMs!, app.log)
        : null
    app.addHook('onClose', async () => {
      await maintenance?.stop()
      if (opts.closeOnShutdown) await opts.database.close()
    })
  },
  { name: 'db', fastify: '5.x' }
)
