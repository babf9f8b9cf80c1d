/**
 * A document's chunks: its Markdown cut along its headings. Each chunk belongs
 * to one heading section (its `heading` is the path of headings above it, joined by
 * ` > `), holds at most `maxChars` characters, and never cuts a table row, a line of a
 * code block or a word when it can help it. A table cut across chunks repeats its header
 * row and separator row at the top of each, so every piece reads on its own.
 */

export interface Chunk {
  heading: string
  text: string
}

export const DEFAULT_MAX_CHARS = 2000

type Block = { kind: 'text'; text: string } | { kind: 'table'; head: string[]; rows: string[] }

const FENCE = /^\s{0,3}(`{3,}|~{3,})/
const ATX = /^\s{0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/
const TABLE_SEPARATOR = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/

/** Heading sections: the heading path and the lines under it, code fences kept whole. */
function sections(markdown: string): Array<{ heading: string; lines: string[] }> {
  const out: Array<{ heading: string; lines: string[] }> = [{ heading: '', lines: [] }]
  const path: Array<{ level: number; title: string }> = []
  let fence: string | null = null
  for (const line of markdown.replace(/\r\n?/g, '\n').split('\n')) {
    const opener = FENCE.exec(line)
    if (fence !== null) {
      if (opener && opener[1]![0] === fence[0] && opener[1]!.length >= fence.length && line.trim() === opener[1])
        fence = null
      out[out.length - 1]!.lines.push(line)
      continue
    }
    if (opener) {
      fence = opener[1]!
      out[out.length - 1]!.lines.push(line)
      continue
    }
    const heading = ATX.exec(line)
    if (heading) {
      const level = heading[1]!.length
      const title = (heading[2] ?? '').trim()
      while (path.length > 0 && path[path.length - 1]!.level >= level) path.pop()
      if (title !== '') path.push({ level, title })
      out.push({ heading: path.map((p) => p.title).join(' > '), lines: [] })
      continue
    }
    out[out.length - 1]!.lines.push(line)
  }
  return out
}

/** A section's blocks: paragraphs (and whole code blocks) split on blank lines, and tables. */
function blocks(lines: string[]): Block[] {
  const out: Block[] = []
  let paragraph: string[] = []
  const flush = () => {
    const text = paragraph.join('\n').trim()
    if (text !== '') out.push({ kind: 'text', text })
    paragraph = []
  }
  let fence: string | null = null
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!
    const opener = FENCE.exec(line)
    if (fence !== null || opener) {
      if (fence === null) fence = opener![1]!
      else if (opener && opener[1]![0] === fence[0] && line.trim() === opener[1]) fence = null
      paragraph.push(line)
      continue
    }
    // a table: a row, then its separator row, then rows while lines carry a pipe
    if (
      line.includes('|') &&
      i + 1 < lines.length &&
      TABLE_SEPARATOR.test(lines[i + 1]!) &&
      lines[i + 1]!.includes('-')
    ) {
      flush()
      const head = [line.trim(), lines[i + 1]!.trim()]
      const rows: string[] = []
      i += 2
      while (i < lines.length && lines[i]!.includes('|') && lines[i]!.trim() !== '') rows.push(lines[i++]!.trim())
      i--
      out.push({ kind: 'table', head, rows })
      continue
    }
    if (line.trim() === '') flush()
    else paragraph.push(line)
  }
  flush()
  return out
}

/** Cuts text longer than `max` at line breaks, then spaces, then anywhere (never inside a surrogate pair). */
function cutText(text: string, max: number): string[] {
  const out: string[] = []
  let rest = text
  while (rest.length > max) {
    const window = rest.slice(0, max + 1)
    let at = window.lastIndexOf('\n')
    if (at < max / 2) at = Math.max(window.lastIndexOf(' '), at)
    if (at <= 0) {
      at = max
      const code = rest.charCodeAt(at - 1)
      if (code >= 0xd800 && code <= 0xdbff) at--
    }
    const piece = rest.slice(0, at).trimEnd()
    if (piece !== '') out.push(piece)
    rest = rest.slice(at).replace(/^[ \n]+/, '')
  }
  if (rest.trim() !== '') out.push(rest)
  return out
}

/** A table as pieces of at most `max` characters, each led by the header and separator rows. */
function cutTable(table: { head: string[]; rows: string[] }, max: number): string[] {
  const head = table.head.join('\n')
  // a header too long to repeat is cut like text: no piece can hold it and a row
  if (head.length + 2 > max / 2) return cutText([head, ...table.rows].join('\n'), max)
  const out: string[] = []
  let piece = head
  let rows = 0
  for (const row of table.rows) {
    const cells = row.length + head.length + 1 > max ? cutText(row, max - head.length - 1) : [row]
    for (const cell of cells) {
      if (piece.length + 1 + cell.length > max && rows > 0) {
        out.push(piece)
        piece = head
        rows = 0
      }
      piece += `\n${cell}`
      rows++
    }
  }
  if (rows > 0 || out.length === 0) out.push(piece)
  return out
}

export function chunkMarkdown(markdown: string, maxChars = DEFAULT_MAX_CHARS): Chunk[] {
  const chunks: Chunk[] = []
  for (const section of sections(markdown)) {
    let current = ''
    const emit = () => {
      if (current.trim() !== '') chunks.push({ heading: section.heading, text: current })
      current = ''
    }
    const add = (piece: string) => {
      if (current === '') current = piece
      else if (current.length + 2 + piece.length <= maxChars) current += `\n\n${piece}`
      else {
        emit()
        current = piece
      }
    }
    for (const block of blocks(section.lines)) {
      if (block.kind === 'table') {
        const whole = [...block.head, ...block.rows].join('\n')
        if (whole.length <= maxChars) {
          // a table that fits in a chunk of its own is never cut
          if (current !== '' && current.length + 2 + whole.length > maxChars) emit()
          add(whole)
        } else {
          emit()
          for (const piece of cutTable(block, maxChars)) {
            add(piece)
            emit()
          }
        }
      } else {
        for (const piece of block.text.length <= maxChars ? [block.text] : cutText(block.text, maxChars)) add(piece)
      }
    }
    emit()
  }
  return chunks
}
