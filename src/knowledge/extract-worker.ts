// The extraction process (see extract.ts): parses one document and answers with its Markdown
// or with why it has none. Everything here may be slow or large; the parent bounds both.
import { gfm } from '@joplin/turndown-plugin-gfm'
import { unzipSync } from 'fflate'
import mammoth from 'mammoth'
import { PDFParse } from 'pdf-parse'
import TurndownService from 'turndown'
import type { WorkerReply, WorkerRequest } from './extract.js'

/** A DOCX whose parts expand to more than this is refused before anything is inflated. */
const MAX_DOCX_EXPANDED_BYTES = 100 * 1024 * 1024
/** More pages than this is refused: text of a page costs time even when the page is empty. */
const MAX_PDF_PAGES = 5000

class Refused extends Error {}

function toMarkdown(html: string): string {
  const turndown = new TurndownService({ headingStyle: 'atx', codeBlockStyle: 'fenced', bulletListMarker: '-' })
  turndown.use(gfm)
  turndown.remove(['script', 'style', 'noscript', 'template', 'iframe', 'object', 'embed', 'head', 'title'])
  return turndown.turndown(html)
}

/**
 * Word tables have no header cells, and a GFM table needs a header row: mammoth's tables
 * (simple, well-formed HTML) get their first row as the header, as a reader sees it.
 */
function firstRowsAsHeaders(html: string): string {
  return html.replace(/<table>([\s\S]*?)<\/table>/g, (table: string, inner: string) =>
    inner.includes('<th')
      ? table
      : `<table>${inner.replace(
          /<tr>([\s\S]*?)<\/tr>/,
          (_row: string, cells: string) =>
            `<tr>${cells.replace(/<td(\s[^>]*)?>/g, '<th$1>').replace(/<\/td>/g, '</th>')}</tr>`
        )}</table>`
  )
}

function checkZipSize(bytes: Uint8Array): void {
  let expanded = 0
  try {
    // the filter sees each entry's declared size from the central directory and inflates nothing
    unzipSync(bytes, {
      filter(file) {
        expanded += file.originalSize
        return false
      }
    })
  } catch (err) {
    throw new Refused(`the DOCX is damaged: ${(err as Error).message}`)
  }
  if (expanded > MAX_DOCX_EXPANDED_BYTES)
    throw new Refused(`the DOCX expands to more than ${MAX_DOCX_EXPANDED_BYTES / 1024 / 1024} MB`)
}

async function pdfText(bytes: Uint8Array): Promise<string> {
  const parser = new PDFParse({ data: bytes })
  try {
    const info = await parser.getInfo().catch((err: unknown) => {
      throw new Refused(`the PDF is damaged: ${(err as Error).message}`)
    })
    if (info.total > MAX_PDF_PAGES)
      throw new Refused(`the PDF has ${info.total} pages; at most ${MAX_PDF_PAGES} are read`)
    const result = await parser.getText({ pageJoiner: '' }).catch((err: unknown) => {
      throw new Refused(`the PDF is damaged: ${(err as Error).message}`)
    })
    return result.pages
      .map((p) => p.text.trim())
      .filter((t) => t !== '')
      .join('\n\n')
  } finally {
    await parser.destroy().catch(() => {})
  }
}

async function extract(request: WorkerRequest): Promise<string> {
  const { bytes, kind } = request
  switch (kind) {
    case 'pdf':
      return pdfText(bytes)
    case 'docx': {
      checkZipSize(bytes)
      const { value } = await mammoth.convertToHtml({ buffer: Buffer.from(bytes) }).catch((err: unknown) => {
        throw new Refused(`the DOCX cannot be read: ${(err as Error).message}`)
      })
      return toMarkdown(firstRowsAsHeaders(value))
    }
    case 'html':
      return toMarkdown(Buffer.from(bytes).toString('utf8'))
    default:
      return Buffer.from(bytes).toString('utf8')
  }
}

const answer = (reply: WorkerReply) => process.send!(reply, () => process.exit(0))

// the parent kills this process past its deadline; if the parent dies first, so does this
process.on('disconnect', () => process.exit(1))
process.once('message', (request: WorkerRequest) => {
  extract({ ...request, bytes: new Uint8Array(request.bytes) }).then(
    (markdown) => {
      const text = markdown.replace(/\r\n?/g, '\n').trim()
      answer(
        text.length > request.maxOutputChars
          ? { ok: false, message: `the document has more than ${request.maxOutputChars} characters of text` }
          : { ok: true, markdown: text }
      )
    },
    (err: unknown) => {
      const message = err instanceof Refused ? err.message : `the document cannot be read: ${(err as Error).message}`
      answer({ ok: false, message: message.slice(0, 500) })
    }
  )
})
