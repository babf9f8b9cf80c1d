import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import type { TLSSocket } from 'node:tls'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify'

/**
 * Router-level refusals: requests refused before any route runs, by Node's
 * HTTP parser (431, 408, a malformed request line) or by Fastify's router (a malformed or
 * over-long URL), answered with the contract's error body and the same fixed headers as
 * every other answer. Fastify's own answers for these are bodies of its shape echoing the
 * URL, without our headers; Node's are bare status lines.
 */

/** The fixed headers an answer to `url` carries (plugins/security-headers.ts `fixedHeaders`). */
export type HeadersFor = (url: string, secure: boolean) => Readonly<Record<string, string>>

/**
 * A path parameter longer than this is `414 uri_too_long` (Fastify's router stops there).
 * Well above the longest value any route takes (a secret's name, 128), so a value one
 * character too long still reaches its schema and is `400 validation_failed` naming it.
 */
export const MAX_PARAM_LENGTH = 1024
/** An unmatched path longer than this is `414 uri_too_long` rather than `404`. */
export const MAX_PATH_LENGTH = 2048

// visible ASCII, as an id a proxy or client would send for tracing; anything else is replaced
const REQUEST_ID = /^[\x21-\x7e]{1,128}$/

/**
 * Fastify's genReqId: the client's `x-request-id` when it is at most 128 visible ASCII characters, else a fresh one.
 */
export function requestIdOf(req: IncomingMessage): string {
  const sent = req.headers['x-request-id']
  return typeof sent === 'string' && REQUEST_ID.test(sent) ? sent : randomUUID()
}

/**
 * Fastify's `frameworkErrors`: a URL the router cannot decode (`/%zz`, invalid UTF-8) and
 * a path parameter over MAX_PARAM_LENGTH. No hook has run, so the fixed headers and the
 * request id are set here.
 */
export function frameworkErrors(headersFor: HeadersFor) {
  return function onFrameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
    const [status, body] =
      error.code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? [414, { error: 'uri_too_long', message: `a path segment is longer than ${MAX_PARAM_LENGTH} characters` }]
        : [400, { error: 'bad_request', message: 'the URL is not valid (bad percent-encoding or UTF-8)' }]
    request.log.info({ err: { code: error.code }, status }, 'request rejected')
    return reply
      .headers(headersFor(request.url, request.protocol === 'https'))
      .header('x-request-id', request.id)
      .code(status)
      .type('application/json; charset=utf-8')
      .send(body)
  }
}

interface ConnectionError extends Error {
  code?: string
  rawPacket?: unknown
}

const REASONS: Record<number, string> = {
  400: 'Bad Request',
  408: 'Request Timeout',
  414: 'URI Too Long',
  431: 'Request Header Fields Too Large'
}

/**
 * Node counts the request line toward its header limit (16 KB): when the packet that
 * overflowed starts with a request line that is itself most of the limit, the URL is what
 * is too long. (A URL sent over several packets is reported as 431.)
 */
function overlongRequestLine(packet: unknown): boolean {
  if (!Buffer.isBuffer(packet) || !/^[A-Z]+ /.test(packet.toString('latin1', 0, 16))) return false
  const end = packet.indexOf('\r\n')
  return end < 0 || end > 8192
}

/** What a refused request is answered, from Node's parser error. */
function clientRefusal(err: ConnectionError): [number, string, string] {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [408, 'request_timeout', 'the request was not received in time']
    case 'HPE_HEADER_OVERFLOW':
      return overlongRequestLine(err.rawPacket)
        ? [414, 'uri_too_long', 'the URL is too long']
        : [431, 'headers_too_large', 'the request headers are too large']
    default:
      return [400, 'bad_request', 'the request is not valid HTTP']
  }
}

/**
 * Fastify's `clientErrorHandler`, for errors Node's HTTP server raises before a request
 * exists (headers too large, a malformed request line, a request not received within
 * `requestTimeout`): Node hands over the socket, so the status line, headers and body are
 * written by hand, then the connection is closed. The URL is unknown, so the /api set of
 * headers is used.
 */
export function clientErrorHandler(headersFor: HeadersFor) {
  return function onClientError(this: FastifyInstance, err: ConnectionError, socket: Socket) {
    if (err.code === 'ECONNRESET' || socket.destroyed) return
    const [status, error, message] = clientRefusal(err)
    this.log.info({ err: { code: err.code }, status }, 'request rejected by the HTTP parser')
    // a response already started on this socket cannot be replaced
    const inFlight = (socket as Socket & { _httpMessage?: { _headerSent?: boolean } | null })._httpMessage
    if (socket.writable && inFlight?._headerSent !== true) {
      const body = JSON.stringify({ error, message })
      const headers: Record<string, string | number> = {
        ...headersFor('/api', (socket as TLSSocket).encrypted === true),
        'x-request-id': randomUUID(),
        'content-type': 'application/json; charset=utf-8',
        'content-length': Buffer.byteLength(body),
        connection: 'close'
      }
      const head = Object.entries(headers)
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join('')
      socket.write(`HTTP/1.1 ${status} ${REASONS[status]}\r\n${head}\r\n${body}`)
    }
    socket.destroy(err)
  }
}

const METHODS: readonly HTTPMethods[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE']

/**
 * The methods the router has for this URL, for a `405` answer's `Allow` (empty: the path is
 * unknown). OPTIONS is left out: with CORS on, its preflight route matches every path.
 */
export function allowedMethods(app: FastifyInstance, url: string): string[] {
  return METHODS.filter((method) => app.findRoute({ method, url }) !== null)
}
