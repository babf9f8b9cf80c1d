// Real files for the ingestion tests, made in code: PDFs (pdf-lib), a DOCX (docx), HTML,
// Markdown, and hostile ones (a corrupt PDF, a zip-bomb DOCX, ten thousand empty pages).
import { Document, HeadingLevel, Packer, Paragraph, Table, TableCell, TableRow, TextRun } from 'docx'
import { Zip, ZipDeflate, zipSync, strToU8 } from 'fflate'
import { PDFDocument, StandardFonts } from 'pdf-lib'

/** A text PDF: one page per entry, each line drawn as text. */
export async function textPdf(pages: string[][]): Promise<Buffer> {
  const pdf = await PDFDocument.create()
  const font = await pdf.embedFont(StandardFonts.Helvetica)
  for (const lines of pages) {
    const page = pdf.addPage([595, 842])
    lines.forEach((line, i) => page.drawText(line, { x: 50, y: 780 - i * 16, size: 11, font }))
  }
  return Buffer.from(await pdf.save())
}

export async function emptyPagesPdf(count: number): Promise<Buffer> {
  const pdf = await PDFDocument.create()
  for (let i = 0; i < count; i++) pdf.addPage([200, 200])
  return Buffer.from(await pdf.save({ objectsPerTick: 1000 }))
}

/** The PDF's bytes with the middle replaced by noise: a header that promises a PDF and nothing readable after it. */
export function corruptPdf(valid: Buffer): Buffer {
  const bytes = Buffer.from(valid)
  for (let i = 64; i < bytes.length - 16; i++) bytes[i] = (i * 7919) & 0xff
  return bytes
}

export async function docx(): Promise<Buffer> {
  const cell = (text: string) => new TableCell({ children: [new Paragraph(text)] })
  const doc = new Document({
    sections: [
      {
        children: [
          new Paragraph({ text: 'Runbook', heading: HeadingLevel.HEADING_1 }),
          new Paragraph({
            children: [
              new TextRun('Restart the queue with '),
              new TextRun({ text: 'systemctl restart queue', bold: true }),
              new TextRun('.')
            ]
          }),
          new Paragraph({ text: 'Contacts', heading: HeadingLevel.HEADING_2 }),
          new Table({
            rows: [
              new TableRow({ children: [cell('Team'), cell('Pager')] }),
              new TableRow({ children: [cell('Storage'), cell('5551')] }),
              new TableRow({ children: [cell('Network'), cell('5552')] })
            ]
          })
        ]
      }
    ]
  })
  return Buffer.from(await Packer.toBuffer(doc))
}

/**
 * A DOCX-shaped zip whose document.xml inflates to `expandedMb` MB of spaces (deflated to
 * a few hundred KB), written in streamed pieces so the test never holds the expansion.
 */
export function zipBombDocx(expandedMb: number): Buffer {
  const parts: Uint8Array[] = []
  const zip = new Zip((err, chunk) => {
    if (err) throw err
    parts.push(chunk)
  })
  const add = (name: string, text: string) => {
    const file = new ZipDeflate(name, { level: 9 })
    zip.add(file)
    file.push(strToU8(text), true)
  }
  add(
    '[Content_Types].xml',
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
  )
  add(
    '_rels/.rels',
    '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>'
  )
  const body = new ZipDeflate('word/document.xml', { level: 9 })
  zip.add(body)
  const mb = new Uint8Array(1024 * 1024).fill(0x20)
  for (let i = 0; i < expandedMb; i++) body.push(mb, i === expandedMb - 1)
  zip.end()
  return Buffer.concat(parts)
}

/** A zip that is not a DOCX. */
export const plainZip = () => Buffer.from(zipSync({ 'notes.txt': strToU8('just a zip') }))

export const HTML_PAGE = `<!doctype html><html><head><title>Ignored title</title><style>body { color: red }</style></head><body>
<h1>Onboarding</h1><p>Welcome to the <em>platform</em> team.</p>
<script>window.stolen = "SECRET-SCRIPT-TEXT"</script>
<h2>Laptops</h2><p>Ask IT for a laptop on day one.</p>
<table><thead><tr><th>Item</th><th>Owner</th></tr></thead><tbody><tr><td>Laptop</td><td>IT</td></tr><tr><td>Badge</td><td>Security</td></tr></tbody></table>
</body></html>`

/** Markdown with a 200-row table under a heading path. */
export function markdownWithTable(rows = 200): string {
  const lines = [
    '# Inventory',
    '',
    'Every server we run.',
    '',
    '## Servers',
    '',
    '| Host | Region | Role | Notes |',
    '| --- | --- | --- | --- |'
  ]
  for (let i = 0; i < rows; i++)
    lines.push(
      `| host-${String(i).padStart(3, '0')} | eu-west-${i % 3} | ${i % 2 === 0 ? 'web' : 'worker'} | rack ${i} row ${i % 10} |`
    )
  lines.push('', '## Decommissioned', '', 'Nothing yet.')
  return lines.join('\n')
}
