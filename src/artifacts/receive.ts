import type { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { badRequest, payloadTooLarge, unsupportedMediaType } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import type { BlobStore } from './blob-store.js'
import { BlobTooLarge } from './blob-store.js'
import { putBlob, type StoredBlob } from './blobs.js'

/** Multipart framing a body may carry beyond the file itself before Content-Length alone says it is too large. */
export const MULTIPART_OVERHEAD = 1024 * 1024

/**
 * busboy's words for a multipart body that ends before its parts do: "Unexpected end of
 * multipart data" (the body), "Part terminated early due to unexpected end of multipart
 * data" (the part being read).
 */
const CUT_SHORT = /unexpected end of multipart data/i

/** The multipart plugin's limits for a route that takes one file in the field `file`. */
export const oneFileLimits = (maxBytes: number) => ({
  // busboy stops one byte past the limit, so an over-limit file always reaches the meter
  // as too large (never silently cut to the limit)
  fileSize: maxBytes + 1,
  files: 1,
  fields: 0,
  parts: 1,
  headerPairs: 100
})

export interface BlobTarget {
  db: Db
  store: BlobStore
  maxBytes: number
}

/** A 413 before reading the body when its declared length is already over the limit. */
export function refuseLargeLength(
  request: FastifyRequest,
  reply: FastifyReply,
  maxBytes: number,
  allowance: number
): void {
  const length = Number(request.headers['content-length'])
  if (Number.isFinite(length) && length > maxBytes + allowance) {
    reply.header('connection', 'close')
    throw payloadTooLarge(maxBytes)
  }
}

/** Streams a body into the org's blobs; the API's 413 when it is over the limit, with nothing kept. */
export async function storeBody(
  target: BlobTarget,
  reply: FastifyReply,
  orgId: string,
  body: Readable
): Promise<StoredBlob> {
  try {
    return await putBlob(target.db, target.store, orgId, body, target.maxBytes)
  } catch (err) {
    if (err instanceof BlobTooLarge) {
      // the rest of the body is not read: the connection closes after the answer
      reply.header('connection', 'close')
      throw payloadTooLarge(target.maxBytes)
    }
    throw err
  }
}

/**
 * The one file of a multipart body (field `file`), streamed into the org's blobs: its
 * address, its file name and its declared type. 415 for a body that is not multipart,
 * 400 for a malformed one or a missing file, 413 over the limit.
 */
export async function receiveFile(
  target: BlobTarget,
  request: FastifyRequest,
  reply: FastifyReply,
  orgId: string
): Promise<{ blob: StoredBlob; filename: string; mimetype: string }> {
  if (!request.isMultipart()) throw unsupportedMediaType('send the file as multipart/form-data in the field `file`')
  refuseLargeLength(request, reply, target.maxBytes, MULTIPART_OVERHEAD)
  let part
  try {
    part = await request.file()
  } catch (err) {
    throw badRequest(`the multipart body cannot be read: ${(err as Error).message}`)
  }
  if (!part) throw badRequest('the multipart body has no file; send it in the field `file`')
  if (part.fieldname !== 'file') {
    part.file.resume()
    throw badRequest(`the file must be sent in the field \`file\`, not \`${part.fieldname}\``)
  }
  // A body cut short (or missing its closing delimiter) fails the file's stream with
  // busboy's error, which reaches us through the store as whatever the store makes of it.
  // Seen on the stream itself, it is the client's 400; a failure of the store alone (a full
  // disk, S3) stays a 5xx.
  const isCutShort = (err: unknown): err is Error => err instanceof Error && CUT_SHORT.test(err.message)
  // (it may have failed already, before this listener)
  let cutShort = isCutShort(part.file.errored) ? part.file.errored : undefined
  part.file.on('error', (err: Error) => {
    if (isCutShort(err)) cutShort ??= err
  })
  let blob: StoredBlob
  try {
    blob = await storeBody(target, reply, orgId, part.file)
  } catch (err) {
    if (cutShort !== undefined) throw badRequest(`the multipart body cannot be read: ${cutShort.message}`)
    throw err
  }
  // belt and braces: busboy's own flag for a cut file (its limit is one byte past ours)
  if (part.file.truncated) throw payloadTooLarge(target.maxBytes)
  return { blob, filename: part.filename, mimetype: part.mimetype }
}
