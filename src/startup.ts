import { resolve } from 'node:path'
import closeWithGrace from 'close-with-grace'
import type { FastifyInstance } from 'fastify'
import type { Config } from './config.js'
import { DataDirLockedError } from './db/data-dir-lock.js'
import { SecretsKeyMismatch } from './secrets/service.js'

/** Which database, for the start log and error sentences: a path or host:port/db, never credentials. */
export function describeDatabase(config: Pick<Config, 'DATABASE_URL' | 'DATA_DIR'>): string {
  if (!config.DATABASE_URL) return `embedded PGlite in ${resolve(config.DATA_DIR, 'pglite')}`
  try {
    const url = new URL(config.DATABASE_URL)
    const name = decodeURIComponent(url.pathname.slice(1)) || '(default database)'
    return `Postgres at ${url.hostname || 'localhost'}:${url.port || '5432'}/${name}`
  } catch {
    return 'Postgres (DATABASE_URL)'
  }
}

/** Where the API, its docs and the Memory Hub console answer, from the bound address. */
export function describeListening(host: string, port: number): string {
  const wildcard = host === '0.0.0.0' || host === '::'
  const shown = wildcard ? 'localhost' : host.includes(':') ? `[${host}]` : host
  const base = `http://${shown}:${port}`
  return `API at ${base}/api, docs at ${base}/docs, Memory Hub at ${base}/hub/${wildcard ? ` (listening on all interfaces, ${host})` : ''}`
}

type StartError = Error & { code?: string; errors?: Array<{ code?: string }>; hostname?: string; path?: string }

/**
 * The one sentence for a start that failed for a reason the operator fixes (database
 * down or missing, data directory taken or unwritable); null for anything else, which
 * is a bug and keeps its stack.
 */
export function startFailure(err: unknown, config: Pick<Config, 'DATABASE_URL' | 'DATA_DIR'>): string | null {
  if (err instanceof DataDirLockedError || err instanceof SecretsKeyMismatch) return err.message
  if (!(err instanceof Error)) return null
  const e = err as StartError
  const code = e.code ?? e.errors?.[0]?.code
  const where = describeDatabase(config)
  switch (code) {
    case 'ECONNREFUSED':
      return `cannot reach the database: ${where} refused the connection (is Postgres running there?)`
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot reach the database: the host of ${where} is not known`
    case 'ETIMEDOUT':
    case 'CONNECT_TIMEOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `cannot reach the database: ${where} did not answer`
    case 'ECONNRESET':
      return `cannot reach the database: ${where} closed the connection`
    case '3D000':
      return `the database does not exist: ${where} (create it, or fix DATABASE_URL)`
    case '28P01':
    case '28000':
      return `the database refused the credentials in DATABASE_URL for ${where}`
    case '57P03':
      return `the database is starting up or shutting down: ${where}; try again shortly`
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
    case 'ENOSPC':
      if (!config.DATABASE_URL)
        return `cannot use the data directory ${resolve(config.DATA_DIR)}: ${code} on ${e.path ?? 'a file in it'}`
      return null
    default:
      return null
  }
}

// SIGTERM/SIGINT: refuse new requests (503), hand running runs back to the queue, end
// event streams and WebSockets with a reconnectable close, let in-flight requests finish,
// close the database, exit 0, all within SHUTDOWN_GRACE_MS. Connections still busy at
// four fifths of it are cut, so that the close ends in time rather than by the timer of
// close-with-grace (which exits 1). Every hook that waits is bounded by the grace
// (plugins/shutdown.ts: workers drain within half of it, anything else a worker left is
// its lease's); should a close still hang, the process exits 0 at nineteen twentieths of
// the grace with what was not closed left as it is. An uncaught exception does the same,
// then exits 1.
export function closeOnSignals(app: FastifyInstance, graceMs: number): void {
  closeWithGrace({ delay: graceMs, logger: app.log, skip: ['unhandledRejection'] }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error')
    else app.log.info({ signal }, 'shutting down')
    const cut = setTimeout(
      () => {
        app.log.warn('shutting down: cutting the connections still busy')
        app.server.closeAllConnections()
      },
      Math.floor(graceMs * 0.8)
    )
    let last: NodeJS.Timeout | undefined
    const closed = await Promise.race([
      app.close().then(() => true),
      new Promise<false>((resolve) => (last = setTimeout(() => resolve(false), Math.floor(graceMs * 0.95))))
    ]).finally(() => {
      clearTimeout(cut)
      clearTimeout(last)
    })
    app.log[closed ? 'info' : 'warn'](
      closed ? 'shut down' : 'shut down: the close did not finish within the grace; exiting with it unfinished'
    )
  })
}
