import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { fork, type ChildProcess } from 'node:child_process'
import { fileTypeFromBuffer } from 'file-type'

/**
 * Knowledge documents: which files are taken, and their text as Markdown. Parsing
 * runs in a child process per document, so a hostile file (a zip bomb, a PDF of ten
 * thousand pages, megabytes of nested tags) costs that process, not the service: its heap
 * is capped (`--max-old-space-size`), it is killed when it runs past the time limit, and
 * either way the document fails with a sentence saying why. A worker thread is not
 * enough: one large allocation past a thread's `resourceLimits` aborts the whole process
 * (seen with 90 MB of nested HTML), while a child's abort is the child's alone.
 */

export const DOCUMENT_KINDS = ['pdf', 'docx', 'html', 'markdown', 'text'] as const
export type DocumentKind = (typeof DOCUMENT_KINDS)[number]

const CONTENT_TYPES: Record<DocumentKind, string> = {
  pdf: 'application/pdf',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  html: 'text/html',
  markdown: 'text/markdown',
  text: 'text/plain'
}

export const contentTypeOf = (kind: DocumentKind): string => CONTENT_TYPES[kind]

/** Why a document has no text: a short sentence for `lastError`, safe to show (no paths, no stacks). */
export class ExtractionFailed extends Error {
  override name = 'ExtractionFailed'
}

export interface ExtractLimits {
  timeoutMs: number
  /** the extraction process's heap */
  maxMemoryMb: number
  /** longer text is refused, not cut: a half-indexed document would look complete */
  maxOutputChars: number
}

export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = { timeoutMs: 60_000, maxMemoryMb: 512, maxOutputChars: 5_000_000 }

const BY_EXTENSION: Record<string, DocumentKind> = {
  pdf: 'pdf',
  docx: 'docx',
  html: 'html',
  htm: 'html',
  xhtml: 'html',
  md: 'markdown',
  markdown: 'markdown',
  txt: 'text',
  text: 'text'
}
const BY_TYPE: Record<string, DocumentKind> = {
  'application/pdf': 'pdf',
  [CONTENT_TYPES.docx]: 'docx',
  'text/html': 'html',
  'application/xhtml+xml': 'html',
  'text/markdown': 'markdown',
  'text/x-markdown': 'markdown',
  'text/plain': 'text'
}

const isUtf8Text = (bytes: Uint8Array) => {
  if (bytes.includes(0)) return false
  try {
    // the head may end inside a character: only a bad sequence before its last 3 bytes counts
    new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, Math.max(0, bytes.length - 3)))
    return true
  } catch {
    return false
  }
}

/**
 * The kind of an uploaded file from its first bytes, its name and its declared type. A
 * signature in the bytes wins: a PDF declared as text is a PDF, a PNG named notes.md is
 * refused, a zip is a DOCX only when it says so. Bytes without a signature must be UTF-8
 * text, and then the declared type or the extension says which text.
 */
export async function documentKind(
  name: string,
  declaredType: string | undefined,
  head: Uint8Array
): Promise<DocumentKind | null> {
  const extension = /\.([A-Za-z0-9]+)$/.exec(name)?.[1]?.toLowerCase() ?? ''
  const declared = (declaredType ?? '').split(';')[0]!.trim().toLowerCase()
  const sniffed = await fileTypeFromBuffer(head).catch(() => undefined)
  if (sniffed) {
    if (sniffed.ext === 'pdf') return 'pdf'
    if (sniffed.ext === 'docx') return 'docx'
    // the head may end before the zip names word/document.xml
    if (sniffed.ext === 'zip' && (extension === 'docx' || declared === CONTENT_TYPES.docx)) return 'docx'
    // file-type reads some text as xml or html
    if (sniffed.ext !== 'xml' && sniffed.ext !== 'html') return null
  }
  if (!isUtf8Text(head)) return null
  const byName = BY_TYPE[declared] ?? BY_EXTENSION[extension]
  if (byName === 'pdf' || byName === 'docx') return null
  if (byName) return byName
  if (declared === '' || declared === 'application/octet-stream') {
    return /^\s*<(!doctype html|html)[\s>]/i.test(Buffer.from(head.subarray(0, 512)).toString('utf8')) ? 'html' : 'text'
  }
  return null
}

export interface WorkerRequest {
  bytes: Uint8Array
  kind: DocumentKind
  maxOutputChars: number
}
export type WorkerReply = { ok: true; markdown: string } | { ok: false; message: string }

/**
 * The extraction process: the compiled extract-worker.js beside this file; running from
 * the sources (tsx, tap), the .ts source with tsx loading it.
 */
function startChild(maxMemoryMb: number): ChildProcess {
  const heap = `--max-old-space-size=${maxMemoryMb}`
  const options = {
    serialization: 'advanced' as const,
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'] as ('ignore' | 'pipe' | 'ipc')[]
  }
  const compiled = new URL('./extract-worker.js', import.meta.url)
  if (existsSync(fileURLToPath(compiled))) return fork(fileURLToPath(compiled), [], { ...options, execArgv: [heap] })
  const source = fileURLToPath(new URL('./extract-worker.ts', import.meta.url))
  return fork(source, [], { ...options, execArgv: ['--import', import.meta.resolve('tsx'), heap] })
}

/** Text files need no parser: decoded here, with the same output bound. */
function decodeText(bytes: Uint8Array, maxOutputChars: number): string {
  const text = Buffer.from(bytes)
    .toString('utf8')
    .replace(/^\uFEFF/, '')
    .replace(/\r\n?/g, '\n')
  if (text.length > maxOutputChars)
    throw new ExtractionFailed(`the document has more than ${maxOutputChars} characters of text`)
  return text
}

/** The document's text as Markdown: headings as `#` lines, tables as pipe tables. Rejects with ExtractionFailed. */
export async function extractMarkdown(
  bytes: Uint8Array,
  kind: DocumentKind,
  limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS,
  signal?: AbortSignal
): Promise<string> {
  if (kind === 'text' || kind === 'markdown') return decodeText(bytes, limits.maxOutputChars)
  const child = startChild(limits.maxMemoryMb)
  // parsers may print warnings; only the heap-limit abort is read from them
  let stderr = ''
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', (chunk: string) => {
    if (stderr.length < 4096) stderr += chunk
  })
  try {
    return await new Promise<string>((resolve, reject) => {
      const settle = (fn: () => void) => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        fn()
      }
      const timer = setTimeout(
        () =>
          settle(() =>
            reject(
              new ExtractionFailed(`extracting the text took longer than ${Math.round(limits.timeoutMs / 1000)} s`)
            )
          ),
        limits.timeoutMs
      )
      // a stopping service does not wait for a parse: the process is killed below
      const onAbort = () => settle(() => reject(signal!.reason))
      if (signal?.aborted) return onAbort()
      signal?.addEventListener('abort', onAbort, { once: true })
      child.once('message', (reply: WorkerReply) =>
        settle(() => (reply.ok ? resolve(reply.markdown) : reject(new ExtractionFailed(reply.message))))
      )
      child.once('error', (err: Error) =>
        settle(() => reject(new ExtractionFailed(`the extraction could not run: ${err.message}`)))
      )
      // 'close', not 'exit': it comes after the IPC channel has delivered every message
      child.once('close', (code, sig) =>
        settle(() =>
          reject(
            new ExtractionFailed(
              /heap limit|out of memory/i.test(stderr)
                ? `extracting the text needs more than ${limits.maxMemoryMb} MB`
                : `the extraction stopped (${sig ?? `exit code ${code}`})`
            )
          )
        )
      )
      child.send({ bytes, kind, maxOutputChars: limits.maxOutputChars } satisfies WorkerRequest)
    })
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  }
}
