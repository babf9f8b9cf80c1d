import {
  Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  Schema,
  visit,
  type YAMLError
} from 'yaml'

/**
 * Agent Skills `SKILL.md` files: YAML front matter between `---` lines, then Markdown
 * instructions. The front matter is read by the `yaml` package alone, with the failsafe
 * schema (every scalar a string: `version: 1.0` stays "1.0"), so nothing in a file is ever
 * executed whatever language tag it claims. Every problem is reported, with its 1-based
 * line and column counted from the file's first line; nothing is skipped silently.
 */

export interface SkillFields {
  name: string
  description: string
  /** the Markdown body after the front matter */
  instructions: string
  license: string | null
  compatibility: string | null
  /** the file's space-separated `allowed-tools` */
  allowedTools: string[]
  metadata: Record<string, string>
}

export interface SkillProblem {
  path: string
  message: string
  line?: number
  column?: number
}

export type ParsedSkill = { ok: true; skill: SkillFields } | { ok: false; problems: SkillProblem[] }

export const SKILL_NAME_MAX = 64
export const SKILL_DESCRIPTION_MAX = 1024
export const SKILL_COMPATIBILITY_MAX = 500

const FIELDS = ['name', 'description', 'license', 'compatibility', 'allowed-tools', 'metadata'] as const
type Field = (typeof FIELDS)[number]
const isField = (key: string): key is Field => (FIELDS as readonly string[]).includes(key)

// Agent Skills limits count characters, and an emoji is one character, not two UTF-16 units
const chars = (s: string) => [...s].length
/** A key as one JSON Pointer segment, so a `/` in a metadata name cannot forge a path. */
const segment = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1')

function nameProblems(name: string): string[] {
  if (name === '') return ['name is required']
  const out: string[] = []
  if (chars(name) > SKILL_NAME_MAX) out.push(`name has ${chars(name)} characters; at most ${SKILL_NAME_MAX}`)
  if (!/^[a-z0-9-]*$/.test(name)) out.push('name may contain only lowercase letters, digits and hyphens')
  if (name.startsWith('-') || name.endsWith('-')) out.push('name must not start or end with a hyphen')
  if (name.includes('--')) out.push("name must not contain '--'")
  return out
}

function descriptionProblems(description: string): string[] {
  const n = chars(description.trim())
  if (n === 0) return ['description is required']
  return n > SKILL_DESCRIPTION_MAX ? [`description has ${n} characters; at most ${SKILL_DESCRIPTION_MAX}`] : []
}

const compatibilityProblems = (c: string | null) =>
  c !== null && chars(c) > SKILL_COMPATIBILITY_MAX
    ? [`compatibility has ${chars(c)} characters; at most ${SKILL_COMPATIBILITY_MAX}`]
    : []

// a file joins the tools with spaces, so a name with a space in it would come back as two
const toolProblems = (tool: string) =>
  tool === ''
    ? ['a tool name must not be empty']
    : /\s/.test(tool)
      ? ['a tool name must not contain spaces: allowed-tools is space-separated']
      : []

/** The same rules for fields sent directly (not in a file): paths `/name`, `/description`, ... */
export function checkSkillFields(fields: SkillFields): SkillProblem[] {
  const problems: SkillProblem[] = [
    ...nameProblems(fields.name).map((message) => ({ path: '/name', message })),
    ...descriptionProblems(fields.description).map((message) => ({ path: '/description', message })),
    ...compatibilityProblems(fields.compatibility).map((message) => ({ path: '/compatibility', message })),
    ...fields.allowedTools.flatMap((tool, i) =>
      toolProblems(tool).map((message) => ({ path: `/allowedTools/${i}`, message }))
    )
  ]
  for (const [key, value] of Object.entries(fields.metadata)) {
    // the type says string, but these fields arrive from outside
    if (typeof value !== 'string')
      problems.push({ path: `/metadata/${segment(key)}`, message: `metadata ${key} must be text` })
  }
  const texts: Array<[string, string | null]> = [
    ['/name', fields.name],
    ['/description', fields.description],
    ['/instructions', fields.instructions],
    ['/license', fields.license],
    ['/compatibility', fields.compatibility],
    ...fields.allowedTools.map((tool, i): [string, string] => [`/allowedTools/${i}`, tool]),
    ...Object.entries(fields.metadata).map(([k, v]): [string, string] => [`/metadata/${segment(k)}`, `${k}${v}`])
  ]
  for (const [path, text] of texts)
    if (typeof text === 'string' && text.includes('\u0000')) problems.push({ path, message: 'must not contain U+0000' })
  return problems
}

/** Instructions as a file keeps them: LF line ends, no leading blank lines, no trailing blanks. */
export const normalizeInstructions = (text: string): string =>
  text
    .replace(/\r\n?/g, '\n')
    .replace(/^(?:[ \t]*\n)+/, '')
    .trimEnd()

interface Place {
  line: number
  column: number
}

const CLOSING = /^(?:---|\.\.\.)[ \t]*$/
// gray-matter reads `---js` (and `--- coffee`) as code to run; here only YAML is front matter
const OPENING = /^---[ \t]*(?:([^\s-]\S*)[ \t]*)?$/

function openingProblem(first: string): SkillProblem | null {
  const opening = OPENING.exec(first)
  if (!opening)
    return { path: '/skillMd', message: "a SKILL.md starts with '---' and YAML front matter", line: 1, column: 1 }
  const tag = opening[1]
  if (tag === undefined || /^ya?ml$/i.test(tag)) return null
  return {
    path: '/skillMd',
    message: `front matter in '${tag}' is not accepted: a SKILL.md's front matter is YAML ('---' alone)`,
    line: 1,
    column: first.indexOf(tag, 3) + 1
  }
}

// yaml reads these when a colon inside a value starts a mapping nobody meant
const COLON_CODES = new Set(['BLOCK_AS_IMPLICIT_KEY', 'MULTILINE_IMPLICIT_KEY'])

/** A yaml error or warning as one sentence, placed in the file (the YAML starts on line 2). */
function yamlProblem(e: YAMLError): SkillProblem {
  // prettyErrors appends the position and a code frame; the position is in line and column
  const first = e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '')
  const hint =
    COLON_CODES.has(e.code) || /followed by map values/.test(first) ? " (quote the value if it contains ': ')" : ''
  const pos = e.linePos?.[0]
  return { path: '/skillMd', message: `${first}${hint}`, line: (pos?.line ?? 1) + 1, column: pos?.col ?? 1 }
}

function placeOf(text: string, index: number): Place {
  const before = text.slice(0, index).split('\n')
  return { line: before.length, column: before.at(-1)!.length + 1 }
}

const kind = (node: unknown) => (isSeq(node) ? 'a list' : isMap(node) ? 'a mapping' : 'not text')

export function parseSkillMd(text: string): ParsedSkill {
  // line numbers stay those of the file as sent: a BOM is no line, and CRLF or CR is one line end
  const source = text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n')
  const nulProblem = nulProblems(source)
  // in the order they appear in the file, as an editor would list them
  const fail = (problems: SkillProblem[]): ParsedSkill => ({
    ok: false,
    problems: [...problems, ...nulProblem].sort((a, b) => a.line! - b.line! || a.column! - b.column!)
  })

  const split = splitFrontMatter(source)
  if ('problem' in split) return fail([split.problem])
  const front = new FrontMatter(split.yaml)
  // past a syntax error the tree is yaml's best guess: checking its fields would report ghosts
  if (front.doc.errors.length > 0) return fail(front.problems)
  if (!front.isMapping()) return fail(front.problems)
  const { name, description, license, compatibility, allowedTools, metadata } = readFields(front)

  if (front.problems.length > 0 || nulProblem.length > 0) return fail(front.problems)
  const instructions = normalizeInstructions(split.body)
  return { ok: true, skill: { name, description, instructions, license, compatibility, allowedTools, metadata } }
}

/** A NUL anywhere in the file, placed. */
function nulProblems(source: string): SkillProblem[] {
  const nul = source.indexOf('\u0000')
  return nul < 0 ? [] : [{ path: '/skillMd', message: 'a SKILL.md must not contain U+0000', ...placeOf(source, nul) }]
}

/** The front matter's YAML and the Markdown body after it, or why the file has no front matter. */
function splitFrontMatter(source: string): { yaml: string; body: string } | { problem: SkillProblem } {
  const lines = source.split('\n')
  const opening = openingProblem(lines[0]!)
  if (opening) return { problem: opening }
  const closing = lines.findIndex((line, i) => i > 0 && CLOSING.test(line))
  if (closing < 0)
    return {
      problem: { path: '/skillMd', message: "the front matter is not closed by a '---' line", line: 1, column: 1 }
    }
  // each front matter line ends in a line break, the last one too: a kept (`|+`) block scalar counts them
  const yaml = lines
    .slice(1, closing)
    .map((line) => `${line}\n`)
    .join('')
  return { yaml, body: lines.slice(closing + 1).join('\n') }
}

// `license:` with nothing after it is the field left out, not the empty string
const blank = (node: unknown) => node === null || (isScalar(node) && node.type === 'PLAIN' && node.value === '')

/** The front matter as yaml read it (failsafe: every scalar a string), and its problems so far, placed in the file. */
class FrontMatter {
  readonly doc: Document.Parsed
  readonly problems: SkillProblem[]
  private readonly lineCounter = new LineCounter()

  constructor(yamlText: string) {
    this.doc = parseDocument(yamlText, {
      schema: 'failsafe',
      prettyErrors: true,
      uniqueKeys: true,
      lineCounter: this.lineCounter
    })
    this.problems = [...this.doc.errors, ...this.doc.warnings].map(yamlProblem)
  }

  /** Where a node starts in the file (the YAML starts on line 2). */
  at(node: unknown): Place {
    const offset = isScalar(node) || isMap(node) || isSeq(node) || isAlias(node) ? (node.range?.[0] ?? 0) : 0
    const pos = this.lineCounter.linePos(offset)
    return { line: pos.line + 1, column: pos.col }
  }

  /** Whether the front matter is a mapping of fields (or empty); reported when not. */
  isMapping(): boolean {
    const contents = this.doc.contents
    const empty = contents === null || (isScalar(contents) && contents.value === '')
    if (empty || isMap(contents)) return true
    this.problems.push({
      path: '/skillMd',
      message: 'the front matter must be a mapping of fields (name: …, description: …)',
      ...this.at(contents)
    })
    return false
  }

  /** What an alias stands for; a missing anchor is reported and reads as nothing. */
  deref(node: unknown, path: string): unknown {
    if (!isAlias(node)) return node
    const target = node.resolve(this.doc)
    if (target === undefined)
      this.problems.push({ path, message: `alias *${node.source} refers to no anchor`, ...this.at(node) })
    return target
  }

  /** A scalar's text, or null (reported) for a list, a mapping or a missing anchor. */
  textOf(node: unknown, path: string, what: string): string | null {
    const value = this.deref(node, path)
    if (value === null) return ''
    if (isScalar(value)) return String(value.value)
    if (value !== undefined)
      this.problems.push({ path, message: `${what} must be text, not ${kind(value)}`, ...this.at(value) })
    return null
  }
}

/** The skill's fields from its front matter (a mapping or empty), each problem reported where it is. */
function readFields(front: FrontMatter): Omit<SkillFields, 'instructions'> {
  const byKey = fieldPairs(front)
  const mapStart = front.at(front.doc.contents)
  const place = (field: Field): Place => {
    const pair = byKey.get(field)
    if (!pair) return mapStart
    return front.at(blank(pair.value) ? pair.key : pair.value)
  }
  /** A text field: undefined when absent, null when not text (already reported). */
  const field = (name: Field): string | null | undefined => {
    const pair = byKey.get(name)
    if (!pair) return undefined
    return front.textOf(pair.value, `/skillMd/${name}`, name)
  }
  const required = (name: 'name' | 'description', rules: (s: string) => string[]): string => {
    const value = field(name)
    if (value === null) return ''
    for (const message of rules(value ?? '')) front.problems.push({ path: `/skillMd/${name}`, message, ...place(name) })
    return value ?? ''
  }
  const optional = (name: 'license' | 'compatibility'): string | null => {
    const pair = byKey.get(name)
    if (!pair || blank(pair.value)) return null
    return field(name) ?? null
  }

  const name = required('name', nameProblems)
  const description = required('description', descriptionProblems)
  const license = optional('license')
  const compatibility = optional('compatibility')
  for (const message of compatibilityProblems(compatibility))
    front.problems.push({ path: '/skillMd/compatibility', message, ...place('compatibility') })
  const allowedTools = readAllowedTools(front, byKey.get('allowed-tools')?.value ?? null)
  const metadata = readMetadata(front, byKey.get('metadata')?.value ?? null)
  return { name, description, license, compatibility, allowedTools, metadata }
}

/** The front matter's known fields by name; a field name that is not plain text, or unknown, is reported. */
function fieldPairs(front: FrontMatter): Map<Field, { key: unknown; value: unknown }> {
  const contents = front.doc.contents
  const byKey = new Map<Field, { key: unknown; value: unknown }>()
  for (const pair of isMap(contents) ? contents.items : []) {
    const keyNode = front.deref(pair.key, '/skillMd')
    const key = isScalar(keyNode) ? String(keyNode.value) : null
    if (key === null) {
      front.problems.push({ path: '/skillMd', message: 'a field name must be plain text', ...front.at(pair.key) })
    } else if (!isField(key)) {
      front.problems.push({
        path: `/skillMd/${segment(key)}`,
        message: `unknown field '${key}' (allowed: ${FIELDS.join(', ')})`,
        ...front.at(pair.key)
      })
    } else {
      byKey.set(key, pair)
    }
  }
  return byKey
}

/** `allowed-tools`: a space-separated string, or a list of names (each may hold several). */
function readAllowedTools(front: FrontMatter, node: unknown): string[] {
  const allowedTools: string[] = []
  const tools = front.deref(node, '/skillMd/allowed-tools')
  const words = (s: string) => s.split(/\s+/).filter(Boolean)
  if (isScalar(tools)) {
    allowedTools.push(...words(String(tools.value)))
  } else if (isSeq(tools)) {
    tools.items.forEach((item, i) => {
      const tool = front.textOf(item, `/skillMd/allowed-tools/${i}`, 'a tool name')
      if (tool !== null) allowedTools.push(...words(tool))
    })
  } else if (tools !== null && tools !== undefined) {
    front.problems.push({
      path: '/skillMd/allowed-tools',
      message: 'allowed-tools must be a space-separated string of tool names (or a list), not a mapping',
      ...front.at(tools)
    })
  }
  return allowedTools
}

/** `metadata`: a mapping of names to text. */
function readMetadata(front: FrontMatter, node: unknown): Record<string, string> {
  const metadata: Record<string, string> = {}
  const meta = front.deref(node, '/skillMd/metadata')
  if (isMap(meta)) {
    for (const pair of meta.items) {
      const keyNode = front.deref(pair.key, '/skillMd/metadata')
      if (!isScalar(keyNode)) {
        if (keyNode !== undefined)
          front.problems.push({
            path: '/skillMd/metadata',
            message: 'a metadata name must be text',
            ...front.at(pair.key)
          })
        continue
      }
      const key = String(keyNode.value)
      const value = front.textOf(pair.value, `/skillMd/metadata/${segment(key)}`, `metadata ${key}`)
      // defined, not assigned: a key named __proto__ is data here, not the object's prototype
      if (value !== null)
        Object.defineProperty(metadata, key, { value, enumerable: true, writable: true, configurable: true })
    }
  } else if (meta !== null && meta !== undefined && !blank(meta)) {
    front.problems.push({
      path: '/skillMd/metadata',
      message: `metadata must be a mapping of names to text, not ${isSeq(meta) ? 'a list' : 'text'}`,
      ...front.at(meta)
    })
  }
  return metadata
}

// Strings that a YAML 1.2 core or a YAML 1.1 reader (PyYAML, many skill loaders) would take as a
// number, a boolean, null, a date or a merge key: written quoted, so every reader sees the same text
const TYPED = [...new Schema({ schema: 'core' }).tags, ...new Schema({ schema: 'yaml-1.1' }).tags].flatMap((tag) =>
  tag.test ? [tag.test] : []
)
const readsAsTyped = (s: string) => TYPED.some((test) => test.test(s))

/** The skill as a SKILL.md; parsing it gives the same fields back. */
export function renderSkillMd(skill: SkillFields): string {
  const front: Record<string, unknown> = { name: skill.name, description: skill.description }
  if (skill.license !== null) front.license = skill.license
  if (skill.compatibility !== null) front.compatibility = skill.compatibility
  if (skill.allowedTools.length > 0) front['allowed-tools'] = skill.allowedTools.join(' ')
  if (Object.keys(skill.metadata).length > 0) front.metadata = skill.metadata
  const doc = new Document(front)
  visit(doc, {
    Scalar(_, node) {
      if (typeof node.value === 'string' && readsAsTyped(node.value)) node.type = 'QUOTE_DOUBLE'
    }
  })
  const instructions = normalizeInstructions(skill.instructions)
  return `---\n${doc.toString({ lineWidth: 0 })}---\n\n${instructions}${instructions === '' ? '' : '\n'}`
}

/** The file name of a skill in its folder (Agent Skills). */
export const SKILL_FILE = 'SKILL.md'

/**
 * Where a skill lives in a repository, from a path naming its folder or the file itself:
 * the folder (`''` at the root) and the file. Slashes are normalized (`./a//b/` is `a/b`).
 */
export function skillMdLocation(path: string): { folder: string; file: string } {
  const parts = path.split('/').filter((p) => p !== '' && p !== '.')
  if (parts[parts.length - 1] === SKILL_FILE) parts.pop()
  const folder = parts.join('/')
  return { folder, file: folder === '' ? SKILL_FILE : `${folder}/${SKILL_FILE}` }
}
