import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { Teardown } from '../helper.js'
import { startServer, type Started } from '../server-process.js'

/**
 * A Postgres cluster of a test's own (initdb on a free port), which the test may stop,
 * crash (`immediate`: no checkpoint, no flush of what is not yet written) and start again.
 * Needs the Postgres 15 server binaries (PG_BIN); `clusterSkip` says why not when missing.
 */

const run = promisify(execFile)
const BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin'
const missing = ['initdb', 'pg_ctl', 'postgres'].filter((bin) => !existsSync(join(BIN, bin)))
export const clusterSkip: string | false =
  missing.length > 0 ? `Postgres server binaries not found in ${BIN} (${missing.join(', ')}); set PG_BIN` : false

/** Runs a Postgres binary, as the `postgres` system user when we are root (initdb refuses root). */
async function pgBin(bin: string, args: string[]): Promise<void> {
  const command = [join(BIN, bin), ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  if (process.getuid?.() === 0) await run('su', ['postgres', '-s', '/bin/sh', '-c', command])
  else await run(join(BIN, bin), args)
}

async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  return port
}

export interface Cluster {
  url: string
  start(): Promise<void>
  stop(mode: 'fast' | 'immediate'): Promise<void>
}

/** `settings`: more `-c name=value` for the server. */
export async function startCluster(t: Teardown, settings: string[] = []): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-pg-'))
  chmodSync(dir, 0o777)
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const data = join(dir, 'data')
  const port = await freePort()
  await pgBin('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'])
  const options = [
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=60`,
    ...settings.map((s) => `-c ${s}`)
  ].join(' ')
  const cluster: Cluster = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    start: () => pgBin('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '30', 'start']),
    stop: (mode) => pgBin('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop'])
  }
  await cluster.start()
  t.teardown(() => cluster.stop('immediate').catch(() => {}))
  return cluster
}

/**
 * The real server (`src/server.ts`, its own process) on `cluster`, as a developer starts it
 * (development, dev org, no sandbox), with its own data directory and `env` on top; killed
 * at teardown.
 */
export async function startServerOn(t: Teardown, cluster: Cluster, env: Record<string, string> = {}): Promise<Started> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-cluster-server-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const server = await startServer({
    NODE_ENV: 'development',
    ALLOW_DEV_ORG: 'true',
    DATABASE_URL: cluster.url,
    DATA_DIR: dataDir,
    SANDBOX_PROVIDER: 'none',
    ...env
  })
  t.teardown(async () => {
    server.kill('SIGKILL')
    await server.exit
  })
  return server
}
