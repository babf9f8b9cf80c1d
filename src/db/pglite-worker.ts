// The embedded database's thread: PGlite (Postgres compiled to WebAssembly) behind the
// Postgres wire protocol. The service's thread talks to it with postgres.js over a
// MessagePort (src/db/pglite-thread.ts), exactly as it talks to a real server over TCP,
// so queries are named prepared statements, pipelined, and the WebAssembly work runs on
// this thread instead of the event loop that serves HTTP.
//
// Framing only: every complete message received is handed to PGlite in one
// `execProtocolRawStream` call (Postgres reads them in order, as from a socket); its answer goes
// back as one message. A NotificationResponse in an answer is also posted on its own, for
// the LISTEN side of the event bus. One client at a time: a Terminate ends it, and a new
// client starts with no statement or transaction left from the last.
import { readFileSync } from 'node:fs'
import { parentPort, workerData } from 'node:worker_threads'
import { PGlite } from '@electric-sql/pglite'
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm'
import { vector } from '@electric-sql/pglite-pgvector'
import { unpackedBundle } from './pglite-extensions.js'
import { pgliteTemplate } from './pglite-template.js'

export interface PgliteWorkerData {
  /** a directory, or `memory://` */
  location: string
  /** a data directory dump (tar) a new database starts from, instead of the empty template */
  template?: string
}

/** The service thread → this thread. */
export type ToWorker =
  { type: 'connect' } | { type: 'data'; bytes: Uint8Array } | { type: 'disconnect' } | { type: 'close' }

/** This thread → the service thread. */
export type FromWorker =
  | { type: 'ready' }
  | { type: 'failed'; message: string }
  | { type: 'data'; bytes: Uint8Array }
  | { type: 'notification'; channel: string; payload: string }
  | { type: 'error'; message: string }
  | { type: 'closed' }

const port = parentPort!
const post = (message: FromWorker, transfer?: ArrayBuffer[]) => port.postMessage(message, transfer ?? [])

/** ParameterStatus and friends carry a type byte; the startup message has none. */
const STARTUP_VERSION = 0x0003_0000
const TERMINATE = 0x58 // 'X'
const NOTIFICATION = 0x41 // 'A'

let lite: PGlite
try {
  const { location, template: dump } = workerData as PgliteWorkerData
  const template = dump ? new Blob([readFileSync(dump)]) : pgliteTemplate(location)
  lite = await PGlite.create(location, {
    extensions: { pg_trgm: unpackedBundle(pg_trgm), vector: unpackedBundle(vector) },
    ...(template ? { loadDataDir: template } : {})
  })
} catch (err) {
  post({ type: 'failed', message: err instanceof Error ? err.message : String(err) })
  process.exit(1)
}

let pending: Buffer = Buffer.alloc(0)
let started = false
let connected = false
let busy = false
let closing = false

port.on('message', (message: ToWorker) => {
  switch (message.type) {
    case 'connect':
      pending = Buffer.alloc(0)
      started = false
      connected = true
      break
    case 'data':
      if (!connected) return
      pending = pending.length === 0 ? Buffer.from(message.bytes) : Buffer.concat([pending, message.bytes])
      void drain()
      break
    case 'disconnect':
      connected = false
      pending = Buffer.alloc(0)
      void drain()
      break
    case 'close':
      closing = true
      void drain()
      break
  }
})

/** Complete messages at the front of `pending` (and whether a Terminate ends them). */
function takeComplete(): { bytes: Buffer; terminate: boolean } | null {
  let end = 0
  if (!started) {
    if (pending.length < 8) return null
    const length = pending.readInt32BE(0)
    if (pending.readInt32BE(4) !== STARTUP_VERSION || pending.length < length) return null
    started = true
    end = length
  }
  let terminate = false
  while (end + 5 <= pending.length) {
    const length = 1 + pending.readInt32BE(end + 1)
    if (end + length > pending.length) break
    if (pending[end] === TERMINATE) {
      terminate = true
      break
    }
    end += length
  }
  if (end === 0 && !terminate) return null
  const bytes = pending.subarray(0, end)
  pending = terminate ? Buffer.alloc(0) : pending.subarray(end)
  return { bytes, terminate }
}

async function drain(): Promise<void> {
  if (busy) return
  busy = true
  try {
    for (;;) {
      const next = connected ? takeComplete() : null
      if (!next) break
      if (next.bytes.length > 0) {
        const answer = await execute(next.bytes)
        notify(answer)
        post({ type: 'data', bytes: answer }, [answer.buffer as ArrayBuffer])
      }
      if (next.terminate) connected = false
    }
    // the client went away (Terminate, or its socket ended): what it left open goes too
    if (!connected) await reset()
    if (closing) {
      await lite.close()
      post({ type: 'closed' })
      port.close()
    }
  } catch (err) {
    post({ type: 'error', message: err instanceof Error ? err.message : String(err) })
  } finally {
    busy = false
  }
}

/**
 * Runs complete messages and returns PGlite's answer, in a buffer of its own (to transfer).
 * The answer's bytes are taken as PGlite writes them (`execProtocolRawStream`), not with
 * `execProtocolRaw`: that one also parses every answer into JavaScript objects and keeps them
 * for the life of the session (PGlite 0.5), so a long-lived connection grows the heap without
 * end and the collector's pauses with it.
 */
async function execute(bytes: Uint8Array): Promise<Uint8Array> {
  const chunks: Uint8Array[] = []
  let size = 0
  // each chunk is a view of PGlite's memory, valid during the call only
  await lite.execProtocolRawStream(bytes, {
    onRawData: (chunk) => {
      chunks.push(chunk.slice())
      size += chunk.length
    }
  })
  if (chunks.length === 1) return chunks[0]!
  const answer = new Uint8Array(size)
  let at = 0
  for (const chunk of chunks) {
    answer.set(chunk, at)
    at += chunk.length
  }
  return answer
}

/** Rolls back an open transaction and drops every prepared statement of the session. */
async function reset(): Promise<void> {
  if (lite.closed) return
  if (lite.isInTransaction()) await lite.exec('rollback')
  await lite.exec('deallocate all')
}

/** Posts each NotificationResponse (type 'A': pid, channel, payload) of an answer. */
function notify(answer: Uint8Array): void {
  const view = Buffer.from(answer.buffer, answer.byteOffset, answer.byteLength)
  let at = 0
  while (at + 5 <= view.length) {
    const length = view.readInt32BE(at + 1)
    if (view[at] === NOTIFICATION) {
      const start = at + 9
      const split = view.indexOf(0, start)
      const stop = view.indexOf(0, split + 1)
      post({
        type: 'notification',
        channel: view.toString('utf8', start, split),
        payload: view.toString('utf8', split + 1, stop)
      })
    }
    at += 1 + length
  }
}

post({ type: 'ready' })
