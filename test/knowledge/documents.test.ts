import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { chunkMarkdown } from '../../src/knowledge/chunk.js'
import { documentKind } from '../../src/knowledge/extract.js'
import { multipart, PNG } from '../artifacts/helpers.js'
import { buildTestApp, mintKey, signUpWithOrg, waitFor } from '../helper.js'
import {
  corruptPdf,
  docx,
  emptyPagesPdf,
  HTML_PAGE,
  markdownWithTable,
  plainZip,
  textPdf,
  zipBombDocx
} from './fixtures.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

interface Doc {
  id: string
  name: string
  contentType: string
  size: number
  sha256: string
  state: string
  chunkCount: number
  attempts: number
  lastError: string | null
}
interface ChunkWire {
  index: number
  heading: string
  text: string
}

const DOCUMENT_KEYS = [
  'attempts',
  'chunkCount',
  'contentType',
  'createdAt',
  'id',
  'lastError',
  'name',
  'nextAttemptAt',
  'sha256',
  'size',
  'state',
  'updatedAt'
]

async function send(
  app: App,
  filename: string,
  bytes: Buffer | string,
  type?: string,
  headers: Record<string, string> = {}
) {
  const body = multipart({ filename, bytes, ...(type ? { type } : {}) })
  return app.inject({
    method: 'POST',
    url: '/api/knowledge/documents',
    payload: body.payload,
    headers: { ...body.headers, ...headers }
  })
}

async function settled(app: App, id: string, headers: Record<string, string> = {}): Promise<Doc> {
  return waitFor(
    `document ${id} to settle`,
    async () => {
      const doc = (await app.inject({ method: 'GET', url: `/api/knowledge/documents/${id}`, headers })).json()
        .document as Doc
      return doc.state === 'ready' || doc.state === 'failed' ? doc : null
    },
    60_000
  )
}

async function ingest(
  app: App,
  filename: string,
  bytes: Buffer | string,
  type?: string,
  headers: Record<string, string> = {}
) {
  const res = await send(app, filename, bytes, type, headers)
  if (res.statusCode !== 202) throw new Error(`${res.statusCode} ${res.body}`)
  return settled(app, res.json().document.id, headers)
}

const chunksOf = async (app: App, id: string, headers: Record<string, string> = {}) =>
  (await app.inject({ method: 'GET', url: `/api/knowledge/documents/${id}/chunks`, headers })).json()
    .items as ChunkWire[]

const searchFor = async (app: App, q: string, headers: Record<string, string> = {}) =>
  (await app.inject({ method: 'GET', url: `/api/knowledge/search?${new URLSearchParams({ q })}`, headers })).json()
    .items as Array<{ kind: string; documentId: string | null; title: string; snippet: string }>

t.test(
  'a Markdown file with a 200-row table: chunks follow headings, hold 2,000 characters, repeat the header row',
  async (t) => {
    const app = await buildTestApp(t, { env: { KNOWLEDGE_POLL_MS: '50' } })
    const markdown = markdownWithTable(200)
    const res = await send(app, 'inventory.md', markdown, 'text/markdown')
    t.equal(res.statusCode, 202)
    const queued = res.json().document as Doc
    t.same(Object.keys(queued).sort(), DOCUMENT_KEYS)
    t.match(queued, {
      name: 'inventory.md',
      contentType: 'text/markdown',
      size: Buffer.byteLength(markdown),
      chunkCount: 0,
      lastError: null
    })
    t.ok(['queued', 'processing', 'ready'].includes(queued.state))

    const doc = await settled(app, queued.id)
    t.match(doc, { state: 'ready', attempts: 1, lastError: null })
    const chunks = await chunksOf(app, doc.id)
    t.equal(doc.chunkCount, chunks.length)
    t.same(
      chunks.map((c) => c.index),
      chunks.map((_, i) => i),
      'indexes from 0, in order'
    )
    t.ok(
      chunks.every((c) => c.text.length > 0 && c.text.length <= 2000),
      'every chunk holds at most 2,000 characters'
    )
    t.equal(chunks[0]!.heading, 'Inventory')
    const table = chunks.filter((c) => c.heading === 'Inventory > Servers')
    t.ok(table.length >= 5, `the table is cut into ${table.length} chunks`)
    for (const c of table)
      t.ok(
        c.text.startsWith('| Host | Region | Role | Notes |\n| --- | --- | --- | --- |\n| host-'),
        'each piece starts with the header row'
      )
    const rows = table.flatMap((c) => c.text.split('\n').slice(2))
    t.equal(rows.length, 200, 'every row exactly once')
    t.equal(chunks[chunks.length - 1]!.heading, 'Inventory > Decommissioned')

    const hits = await searchFor(app, 'host-137')
    t.equal(hits[0]?.kind, 'chunk')
    t.equal(hits[0]?.documentId, doc.id)
    t.match(hits[0]?.title, /^inventory\.md > Inventory > Servers$/)
  }
)

t.test('PDF, DOCX and HTML become searchable Markdown', async (t) => {
  const app = await buildTestApp(t, { env: { KNOWLEDGE_POLL_MS: '50' } })
  const pdf = await ingest(
    app,
    'handbook.pdf',
    await textPdf([
      ['Expense policy', 'Receipts are due within thirty days.'],
      ['Travel', 'Book trains over flights under four hours.']
    ]),
    'application/pdf'
  )
  t.match(pdf, { state: 'ready', contentType: 'application/pdf' })
  const pdfText = (await chunksOf(app, pdf.id)).map((c) => c.text).join('\n')
  t.match(pdfText, /Receipts are due within thirty days\./)
  t.match(pdfText, /Book trains over flights under four hours\./)

  const word = await ingest(app, 'runbook.docx', await docx(), 'application/octet-stream')
  t.match(word, {
    state: 'ready',
    contentType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'
  })
  const wordChunks = await chunksOf(app, word.id)
  t.match(
    wordChunks.find((c) => c.heading === 'Runbook')?.text,
    /Restart the queue with \*\*systemctl restart queue\*\*\./
  )
  const contacts = wordChunks.find((c) => c.heading === 'Runbook > Contacts')
  t.match(contacts?.text, /\| Team \| Pager \|\n\| --- \| --- \|\n\| Storage \| 5551 \|/)

  const html = await ingest(app, 'onboarding.html', HTML_PAGE, 'text/html')
  t.match(html, { state: 'ready', contentType: 'text/html' })
  const htmlChunks = await chunksOf(app, html.id)
  t.same(
    htmlChunks.map((c) => c.heading),
    ['Onboarding', 'Onboarding > Laptops']
  )
  const all = htmlChunks.map((c) => c.text).join('\n')
  t.notMatch(all, /SECRET-SCRIPT-TEXT|color: red|Ignored title/, 'scripts, styles and the head are dropped')
  t.match(all, /\| Item \| Owner \|/)

  t.match((await searchFor(app, 'receipts'))[0], { kind: 'chunk', documentId: pdf.id })
  t.match((await searchFor(app, 'systemctl'))[0], { kind: 'chunk', documentId: word.id })
  t.same(await searchFor(app, 'SECRET-SCRIPT-TEXT'), [])
})

t.test('hostile and corrupt files fail cleanly, say why, and can be retried', async (t) => {
  const app = await buildTestApp(t, { env: { KNOWLEDGE_POLL_MS: '50' } })
  const corrupt = await ingest(app, 'broken.pdf', corruptPdf(await textPdf([['hello']])), 'application/pdf')
  t.match(corrupt, { state: 'failed', attempts: 1, chunkCount: 0 })
  t.match(corrupt.lastError, /PDF/)

  const bomb = zipBombDocx(300)
  t.ok(bomb.length < 2 * 1024 * 1024, `the bomb is ${bomb.length} bytes`)
  const exploded = await ingest(app, 'bomb.docx', bomb)
  t.match(exploded, { state: 'failed', lastError: /expands to more than/ })

  const pages = await ingest(app, 'empty.pdf', await emptyPagesPdf(10_000), 'application/pdf')
  t.match(pages, { state: 'failed', lastError: /10000 pages/ })

  // retry: only from failed, with a fresh budget
  const retried = await app.inject({ method: 'POST', url: `/api/knowledge/documents/${corrupt.id}/retry` })
  t.equal(retried.statusCode, 202)
  t.match(retried.json().document, { id: corrupt.id, state: 'queued', attempts: 0 })
  const again = await settled(app, corrupt.id)
  t.match(again, { state: 'failed', attempts: 1 })
  const ok = await ingest(app, 'fine.md', '# Fine\n\ntext')
  const refused = await app.inject({ method: 'POST', url: `/api/knowledge/documents/${ok.id}/retry` })
  t.equal(refused.statusCode, 409)
  t.equal(refused.json().error, 'conflict')
  t.equal((await app.inject({ method: 'POST', url: '/api/knowledge/documents/nope/retry' })).statusCode, 404)
})

t.test('files of other kinds are 415 and leave no document; malformed bodies are 400', async (t) => {
  const app = await buildTestApp(t)
  for (const [name, bytes, type] of [
    ['pixel.png', PNG, 'image/png'],
    ['pixel.md', PNG, 'text/markdown'],
    ['archive.zip', plainZip(), 'application/zip'],
    ['data.bin', Buffer.from([0, 1, 2, 3, 255, 254]), 'application/octet-stream'],
    ['sheet.csv', 'a,b\n1,2\n', 'text/csv']
  ] as const) {
    const res = await send(app, name, bytes, type)
    t.equal(res.statusCode, 415, name)
    t.equal(res.json().error, 'unsupported_media_type')
  }
  const json = await app.inject({ method: 'POST', url: '/api/knowledge/documents', payload: { file: 'x' } })
  t.equal(json.statusCode, 415)
  const wrongField = multipart({ field: 'upload', filename: 'a.txt', bytes: 'x' })
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: '/api/knowledge/documents',
        payload: wrongField.payload,
        headers: wrongField.headers
      })
    ).statusCode,
    400
  )
  // a body cut short, inside the file or inside its closing delimiter: not even a blob is
  // kept (the 415s above leave theirs to the sweeper)
  const blobs = async () => rowsOf(await app.db.execute(sql`select count(*)::int as n from blobs`))
  const blobsBefore = await blobs()
  const whole = multipart({
    filename: 'notes.md',
    type: 'text/markdown',
    bytes: '# Notes\n' + 'a line of notes\n'.repeat(40)
  })
  for (const cut of [100, 4]) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/knowledge/documents',
      payload: whole.payload.subarray(0, whole.payload.length - cut),
      headers: whole.headers
    })
    t.equal(res.statusCode, 400, `cut ${cut} bytes short`)
    t.equal(res.json().error, 'bad_request')
    t.match(res.json().message, /multipart body cannot be read/)
  }
  t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from knowledge_documents`)), [{ n: 0 }])
  t.same(await blobs(), blobsBefore)

  t.equal(
    await documentKind('notes.txt', 'text/plain', Buffer.from('%PDF-1.7\n')),
    'pdf',
    'a signature wins over the declared type'
  )
  t.equal(await documentKind('notes', undefined, Buffer.from('plain words')), 'text')
  t.equal(await documentKind('page', 'application/octet-stream', Buffer.from('<!DOCTYPE html><html>')), 'html')
  t.equal(await documentKind('README.markdown', 'application/octet-stream', Buffer.from('# hi')), 'markdown')
})

t.test('documents: list, delete with their chunks, org isolation, keys kept out', async (t) => {
  const app = await buildTestApp(t, { env: { KNOWLEDGE_POLL_MS: '50' } })
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  const doc = await ingest(app, 'alpha.md', '# Alpha\n\nThe zanzibar protocol.', 'text/markdown', { cookie: a.cookie })
  t.same(await searchFor(app, 'zanzibar', { cookie: b.cookie }), [])
  t.equal((await searchFor(app, 'zanzibar', { cookie: a.cookie })).length, 1)
  t.equal(
    (await app.inject({ method: 'GET', url: `/api/knowledge/documents/${doc.id}`, headers: { cookie: b.cookie } }))
      .statusCode,
    404
  )
  t.same(
    (await app.inject({ method: 'GET', url: '/api/knowledge/documents', headers: { cookie: b.cookie } })).json().items,
    []
  )
  const listed = (
    await app.inject({ method: 'GET', url: '/api/knowledge/documents?state=ready', headers: { cookie: a.cookie } })
  ).json()
  t.same(
    listed.items.map((d: Doc) => d.id),
    [doc.id]
  )
  t.same(
    (
      await app.inject({ method: 'GET', url: '/api/knowledge/documents?state=failed', headers: { cookie: a.cookie } })
    ).json().items,
    []
  )

  const key = await mintKey(app, a.cookie)
  t.equal(
    (
      await app.inject({
        method: 'GET',
        url: '/api/knowledge/documents',
        headers: { authorization: key.authorization }
      })
    ).statusCode,
    401
  )
  t.equal((await send(app, 'k.md', '# k', 'text/markdown', { authorization: key.authorization })).statusCode, 401)

  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/knowledge/documents/${doc.id}`, headers: { cookie: b.cookie } }))
      .statusCode,
    404
  )
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/knowledge/documents/${doc.id}`, headers: { cookie: a.cookie } }))
      .statusCode,
    204
  )
  t.same(rowsOf(await app.db.execute(sql`select count(*)::int as n from knowledge_chunks`)), [{ n: 0 }])
  t.same(await searchFor(app, 'zanzibar', { cookie: a.cookie }), [])
  t.equal(
    (
      await app.inject({
        method: 'GET',
        url: `/api/knowledge/documents/${doc.id}/chunks`,
        headers: { cookie: a.cookie }
      })
    ).statusCode,
    404
  )
})

t.test('the chunker', async (t) => {
  t.same(chunkMarkdown(''), [])
  t.same(chunkMarkdown('# Only a heading'), [])
  t.same(chunkMarkdown('intro\n\n# A\n\none\n\n## B\n\ntwo\n\n# C\n\nthree'), [
    { heading: '', text: 'intro' },
    { heading: 'A', text: 'one' },
    { heading: 'A > B', text: 'two' },
    { heading: 'C', text: 'three' }
  ])
  t.same(chunkMarkdown('# A\n\n```\n# not a heading\n```\n\nafter'), [
    { heading: 'A', text: '```\n# not a heading\n```\n\nafter' }
  ])
  const long = chunkMarkdown(`# Long\n\n${'word '.repeat(1000)}`, 100)
  t.ok(long.length > 10 && long.every((c) => c.text.length <= 100 && !/^\s|\s$/.test(c.text)), 'cut at words')
  t.same(
    long
      .map((c) => c.text)
      .join(' ')
      .split(' ').length,
    1000,
    'no word lost'
  )
  const hard = chunkMarkdown('x'.repeat(250), 100)
  t.same(
    hard.map((c) => c.text.length),
    [100, 100, 50]
  )
  const emoji = chunkMarkdown('😀'.repeat(120), 101)
  t.ok(
    emoji.every((c) => c.text.length <= 101 && !/^[\uDC00-\uDFFF]|[\uD800-\uDBFF]$/.test(c.text)),
    'never inside a surrogate pair'
  )
})

t.test('extraction is bounded in time and memory, and stops when asked', async (t) => {
  const { extractMarkdown, ExtractionFailed } = await import('../../src/knowledge/extract.js')
  const nested = `<html><body>${'<div><span>deep '.repeat(200_000)}${'</span></div>'.repeat(200_000)}</body></html>`
  await t.rejects(
    extractMarkdown(Buffer.from(nested), 'html', { timeoutMs: 200, maxMemoryMb: 1024, maxOutputChars: 10_000_000 }),
    { name: 'ExtractionFailed', message: /took longer than/ }
  )
  await t.rejects(
    extractMarkdown(Buffer.from(nested), 'html', { timeoutMs: 60_000, maxMemoryMb: 32, maxOutputChars: 10_000_000 }),
    { name: 'ExtractionFailed', message: /needs more than 32 MB/ }
  )
  // one allocation far past the limit: a worker thread's abort took the whole service with it
  const huge = `<html><body>${'<div><b>'.repeat(2_000_000)}x${'</b></div>'.repeat(2_000_000)}</body></html>`
  await t.rejects(
    extractMarkdown(Buffer.from(huge), 'html', { timeoutMs: 60_000, maxMemoryMb: 64, maxOutputChars: 10_000_000 }),
    { name: 'ExtractionFailed', message: /needs more than 64 MB/ }
  )
  t.pass('this process is alive')
  await t.rejects(
    extractMarkdown(Buffer.from('x'.repeat(2000)), 'text', { timeoutMs: 1000, maxMemoryMb: 64, maxOutputChars: 1000 }),
    { name: 'ExtractionFailed', message: /more than 1000 characters/ }
  )
  const controller = new AbortController()
  const stopped = extractMarkdown(Buffer.from(nested), 'html', undefined, controller.signal)
  setTimeout(() => controller.abort(new Error('stopping')), 100)
  await t.rejects(stopped, { message: 'stopping' })
  t.ok(new ExtractionFailed('x') instanceof Error)
})
