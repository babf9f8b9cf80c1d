import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Database, Db } from '../src/db/client.js'

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
}

export default fp(async function dbPlugin(app: FastifyInstance, opts: DbPluginOptions) {
  app.decorate('database', opts.database)
  app.decorate('db', opts.database.db)
  if (opts.closeOnShutdown) {
    app.addHook('onClose', async () => {
      await opts.database.close()
    })
  }
}, { name: 'db', fastify: '5.x' })
