import contentDisposition from 'content-disposition'
import type { FastifyReply, FastifyRequest } from 'fastify'
import rangeParser from 'range-parser'
import { rangeNotSatisfiable } from '../../plugins/errors.js'
import type { BlobStore, ByteRange } from './blob-store.js'
import { mediaTypeOf } from './sniff.js'

/** Contents up to this size are sent from one buffer rather than streamed. */
const SMALL_CONTENT = 64 * 1024

/** Types a browser may show in place; everything else is a download. */
const INLINE_TYPES = new Set([
  'text/plain',
  'application/json',
  'application/pdf',
  'image/png',
  'image/jpeg',
  'image/gif',
  'image/webp'
])

export interface Servable {
  orgId: string
  sha256: string
  size: number
  contentType: string
  name: string
  /** the strong ETag, quotes included (`"v3"`) */
  etag: string
  lastModified: Date
}

/** Whether an If-None-Match / If-Match list names this ETag (weak comparison for If-None-Match, as RFC 9110 asks). */
export function etagListMatches(header: string, etag: string, weak: boolean): boolean {
  if (header.trim() === '*') return true
  const bare = (tag: string) => (weak ? tag.replace(/^W\//, '') : tag)
  return header
    .split(',')
    .map((t) => bare(t.trim()))
    .some((t) => t === etag)
}

const headerText = (value: string | string[] | undefined) => (Array.isArray(value) ? value.join(', ') : value)

/** Content-Disposition for a stored name: never a header injection, `filename*` for non-ASCII. */
export function dispositionFor(name: string, contentType: string): string {
  const type = INLINE_TYPES.has(mediaTypeOf(contentType) ?? '') ? 'inline' : 'attachment'
  // an ASCII `filename` for old clients and `filename*` (RFC 5987) whenever the name is not ASCII
  const ascii = name.replace(/[^\x20-\x7e]/g, '?')
  return contentDisposition(name, { type, fallback: ascii })
}

/**
 * Serves stored bytes with HTTP caching and ranges: `ETag`, `If-None-Match`
 * → 304, one `Range` → 206 (several are answered whole, outside the content → 416), a
 * stale `If-Range` → 200 whole; `nosniff`, `CSP: sandbox`, and a Content-Disposition that
 * never lets a browser render HTML or SVG in place.
 */
export async function sendContent(
  store: BlobStore,
  request: FastifyRequest,
  reply: FastifyReply,
  item: Servable
): Promise<FastifyReply> {
  reply.header('etag', item.etag)
  reply.header('last-modified', item.lastModified.toUTCString())
  // cached copies are revalidated with the ETag every time; private: tenant data stays out of shared caches
  reply.header('cache-control', 'private, no-cache')
  reply.header('accept-ranges', 'bytes')
  reply.header('x-content-type-options', 'nosniff')
  reply.header('content-security-policy', 'sandbox')
  reply.header('content-disposition', dispositionFor(item.name, item.contentType))
  const ifNoneMatch = request.headers['if-none-match']
  if (ifNoneMatch !== undefined && etagListMatches(ifNoneMatch, item.etag, true)) return reply.code(304).send()

  let range: ByteRange | undefined
  const header = request.headers.range
  const ifRange = headerText(request.headers['if-range'])
  // If-Range with an ETag other than ours (or a date: ours are ETags) means "send it all"
  if (header !== undefined && (ifRange === undefined || ifRange.trim() === item.etag)) {
    const parsed = rangeParser(item.size, header, { combine: true })
    if (parsed === -1) throw rangeNotSatisfiable(item.size)
    // malformed (-2), not bytes, or several ranges: the whole content
    if (parsed !== -2 && parsed.type === 'bytes' && parsed.length === 1)
      range = { start: parsed[0]!.start, end: parsed[0]!.end }
  }
  const length = range ? range.end - range.start + 1 : item.size
  // small contents are read whole: one read costs less than a stream's machinery
  const body =
    length <= SMALL_CONTENT
      ? await store.readBytes(item.orgId, item.sha256, range)
      : await store.read(item.orgId, item.sha256, range)
  reply.type(item.contentType)
  if (range) {
    reply
      .code(206)
      .header('content-range', `bytes ${range.start}-${range.end}/${item.size}`)
      .header('content-length', range.end - range.start + 1)
  } else {
    reply.header('content-length', item.size)
  }
  return reply.send(body)
}
