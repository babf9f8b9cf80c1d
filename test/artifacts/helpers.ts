import { createHash, randomBytes } from 'node:crypto'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import { rowsOf } from '../../src/db/client.js'

export const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex')

/** A 1×1 PNG. */
export const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
  'base64'
)

/** A multipart/form-data body with one file part (what a browser's FormData sends). */
export function multipart(file: { field?: string; filename: string; type?: string; bytes: Buffer | string }) {
  const boundary = `----cairn${randomBytes(8).toString('hex')}`
  const head =
    `--${boundary}\r\nContent-Disposition: form-data; name="${file.field ?? 'file'}"; filename="${file.filename}"\r\n` +
    (file.type ? `Content-Type: ${file.type}\r\n` : '') +
    '\r\n'
  const payload = Buffer.concat([Buffer.from(head), Buffer.from(file.bytes), Buffer.from(`\r\n--${boundary}--\r\n`)])
  return { payload, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } }
}

export async function upload(
  app: FastifyInstance,
  file: Parameters<typeof multipart>[0],
  headers: Record<string, string> = {}
) {
  const body = multipart(file)
  return app.inject({
    method: 'POST',
    url: '/api/uploads',
    payload: body.payload,
    headers: { ...body.headers, ...headers }
  })
}

export async function createText(
  app: FastifyInstance,
  body: Record<string, unknown>,
  headers: Record<string, string> = {}
) {
  return app.inject({ method: 'POST', url: '/api/artifacts', payload: body, headers })
}

export async function count(app: FastifyInstance, table: string): Promise<number> {
  return rowsOf<{ n: number }>(await app.db.execute(sql.raw(`select count(*)::int as n from ${table}`)))[0]!.n
}

/** Every blob file under DATA_DIR/blobs (temporaries apart), as `org/sha`. */
export function blobFiles(dataDir: string): string[] {
  const root = join(dataDir, 'blobs')
  if (!existsSync(root)) return []
  const out: string[] = []
  for (const org of readdirSync(root)) {
    if (org === '.tmp') continue
    for (const prefix of readdirSync(join(root, org))) {
      for (const name of readdirSync(join(root, org, prefix))) out.push(`${org}/${name}`)
    }
  }
  return out.sort()
}

export function temporaries(dataDir: string): string[] {
  const tmp = join(dataDir, 'blobs', '.tmp')
  return existsSync(tmp) ? readdirSync(tmp) : []
}

/** Lets the sweeper take every unreferenced blob now (as if the writers' pins had passed). */
export async function expirePins(app: FastifyInstance): Promise<void> {
  await app.db.execute(sql`update blobs set pinned_until = now() - interval '1 second'`)
}
