// Code, tests, docs and benches say why in their own words: a reader with a clone of the
// repository has no design document or issue tracker to look up "contract 13.4", "spec
// section 5" or "issue 11" in. A comment states the reason itself, or links the page
// under docs/ that states it for users.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { embeddedOnly } from './passes.js'

const roots = ['src', 'test', 'web', 'docs', 'bench', 'scripts', 'plugins', 'schemas']
const files = ['README.md', 'CONTRIBUTING.md']
const self = join('test', 'no-citations.test.ts')

/** A numbered citation of a document a clone does not have. */
const citation = /\bcontract(?:'s)? (?:section )?\d|\bsection \d+\.\d+|\bspec section \d|\bissue #?\d+\b/i

function walk(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
}

t.test('no file cites a contract, spec section or issue number', embeddedOnly, async (t) => {
  const found: string[] = []
  let read = 0
  for (const file of [...roots.flatMap(walk), ...files]) {
    if (file === self) continue
    const text = readFileSync(file, 'utf8')
    if (text.includes('\u0000')) continue // binary (images)
    read++
    text.split('\n').forEach((line, i) => {
      if (citation.test(line)) found.push(`${file}:${i + 1}: ${line.trim()}`)
    })
  }
  t.ok(read > 100, `read ${read} files`)
  t.same(found, [], 'say the reason in the comment itself, or link the docs/ page that states it')
})
