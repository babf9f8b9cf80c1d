import { Document, isMap, isScalar, isSeq, LineCounter, parseDocument, type Node, type Pair } from 'yaml'

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
const chars = (s: string) => [...s].length

/** The Agent Skills name rules, as sentences. */
function nameProblems(name: string): string[] {
  if (name === '') return ['name is required']
  const out: string[] = []
  if (chars(name) > SKILL_NAME_MAX) out.push(`name has ${chars(name)} characters; at most ${SKILL_NAME_MAX}`)
  if (!/^[a-z0-9-]*$/.test(name)) out.push('name may contain only lowercase letters, digits and hyphens')
  if (name.startsWith('-') || name.endsWith('-')) out.push('name must not start or end with a hyphen')
  if (name.includes('--')) out.push('name must not contain \'--\'')
  return out
}

function descriptionProblems(description: string): string[] {
  const n = chars(description.trim())
  if (n === 0) return ['description is required']
  return n > SKILL_DESCRIPTION_MAX ? [`description has ${n} characters; at most ${SKILL_DESCRIPTION_MAX}`] : []
}

const compatibilityProblems = (c: string | null) =>
  c !== null && chars(c) > SKILL_COMPATIBILITY_MAX ? [`compatibility has ${chars(c)} characters; at most ${SKILL_COMPATIBILITY_MAX}`] : []

/** The same rules for fields sent directly (not in a file): paths `/name`, `/description`, ... */
export function checkSkillFields(fields: SkillFields): SkillProblem[] {
  const problems: SkillProblem[] = [
    ...nameProblems(fields.name).map((message) => ({ path: '/name', message })),
    ...descriptionProblems(fields.description).map((message) => ({ path: '/description', message })),
    ...compatibilityProblems(fields.compatibility).map((message) => ({ path: '/compatibility', message }))
  ]
  const texts: Array<[string, string | null]> = [
    ['/name', fields.name], ['/description', fields.description], ['/instructions', fields.instructions],
    ['/license', fields.license], ['/compatibility', fields.compatibility],
    ...fields.allowedTools.map((tool, i): [string, string] => [`/allowedTools/${i}`, tool]),
    ...Object.entries(fields.metadata).flatMap(([k, v]): Array<[string, string]> => [[`/metadata/${k}`, k], [`/metadata/${k}`, v]])
  ]
  for (const [path, text] of texts) if (text?.includes('\u0000')) problems.push({ path, message: 'must not contain U+0000' })
  return problems
}

/** Instructions as a file keeps them: LF line ends, no leading blank lines, no trailing blanks. */
export const normalizeInstructions = (text: string): string =>
  text.replace(/\r\n?/g, '\n').replace(/^(?:[ \t]*\n)+/, '').trimEnd()

/** A problem at an offset of the front matter, placed in the whole file. */
type At = (offset: number | undefined) => { line: number; column: number }

export function parseSkillMd(text: string): ParsedSkill {
  const lines = text.replace(/^\uFEFF/, '').replace(/\r\n?/g, '\n').split('\n')
  const opening = /^---([^\s-]*)[ \t]*$/.exec(lines[0] ?? '')
  if (!opening) {
    return { ok: false, problems: [{ path: '/skillMd', message: 'a SKILL.md starts with \'---\' and YAML front matter', line: 1, column: 1 }] }
  }
  const tag = opening[1]!
  if (tag !== '' && !/^ya?ml$/i.test(tag)) {
    return {
      ok: false,
      problems: [{ path: '/skillMd', message: `front matter in '${tag}' is not accepted: a SKILL.md's front matter is YAML ('---' alone)`, line: 1, column: 4 }]
    }
  }
  const closing = lines.findIndex((line, i) => i > 0 && /^(---|\.\.\.)[ \t]*$/.test(line))
  if (closing < 0) {
    return { ok: false, problems: [{ path: '/skillMd', message: 'the front matter is not closed by a \'---\' line', line: 1, column: 1 }] }
  }
  const yamlText = lines.slice(1, closing).join('\n')
  const instructions = normalizeInstructions(lines.slice(closing + 1).join('\n'))
  const counter = new LineCounter()
  const doc = parseDocument(yamlText, { schema: 'failsafe', prettyErrors: true, uniqueKeys: true, lineCounter: counter })
  // the YAML starts on the file's second line
  const at: At = (offset) => {
    const pos = counter.linePos(offset ?? 0)
    return { line: pos.line + 1, column: pos.col }
  }
  const problems: SkillProblem[] = [...doc.errors, ...doc.warnings].map((e) => {
    const first = e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '')
    const hint = /compact mappings|followed by map values|single line/.test(first) ? ' (quote the value if it contains \': \')' : ''
    const pos = e.linePos?.[0]
    return { path: '/skillMd', message: `${first}${hint}`, line: (pos?.line ?? 1) + 1, column: pos?.col ?? 1 }
  })
  if (problems.length > 0) return { ok: false, problems }
  if (doc.contents !== null && !isMap(doc.contents)) {
    return { ok: false, problems: [{ path: '/skillMd', message: 'the front matter must be a mapping of fields (name: …, description: …)', ...at(doc.contents.range?.[0]) }] }
  }
  const pairs = (isMap(doc.contents) ? doc.contents.items : []) as Array<Pair<Node, Node | null>>
  const byKey = new Map<string, Pair<Node, Node | null>>()
  for (const pair of pairs) {
    const key = isScalar(pair.key) ? String(pair.key.value) : null
    if (key === null || !(FIELDS as readonly string[]).includes(key)) {
      problems.push({
        path: `/skillMd/${key ?? '?'}`,
        message: key === null ? 'a field name must be plain text' : `unknown field '${key}' (allowed: ${FIELDS.join(', ')})`,
        ...at(pair.key?.range?.[0])
      })
    } else {
      byKey.set(key, pair)
    }
  }
  const mapStart = at(isMap(doc.contents) ? doc.contents.range?.[0] : 0)
  /** A string field: its text, or null when absent; a map or list there is a problem. */
  const scalar = (field: string): string | null => {
    const pair = byKey.get(field)
    if (!pair) return null
    if (pair.value === null || (isScalar(pair.value) && pair.value.value === null)) return ''
    if (!isScalar(pair.value)) {
      problems.push({ path: `/skillMd/${field}`, message: `${field} must be text, not a ${isSeq(pair.value) ? 'list' : 'mapping'}`, ...at(pair.value.range?.[0]) })
      return null
    }
    return String(pair.value.value)
  }
  const place = (field: string) => {
    const pair = byKey.get(field)
    return pair ? at((pair.value ?? pair.key).range?.[0]) : mapStart
  }
  // null with the key present: not text, already reported
  const nameValue = scalar('name')
  const descriptionValue = scalar('description')
  const license = scalar('license')
  const compatibility = scalar('compatibility')
  const name = nameValue ?? ''
  const description = descriptionValue ?? ''
  if (nameValue !== null || !byKey.has('name')) {
    for (const message of nameProblems(name)) problems.push({ path: '/skillMd/name', message, ...place('name') })
  }
  if (descriptionValue !== null || !byKey.has('description')) {
    for (const message of descriptionProblems(description)) problems.push({ path: '/skillMd/description', message, ...place('description') })
  }
  for (const message of compatibilityProblems(compatibility)) problems.push({ path: '/skillMd/compatibility', message, ...place('compatibility') })

  let allowedTools: string[] = []
  const tools = byKey.get('allowed-tools')?.value
  if (tools) {
    if (isScalar(tools)) allowedTools = String(tools.value ?? '').split(/\s+/).filter(Boolean)
    else if (isSeq(tools)) {
      for (const item of tools.items as Array<Node | null>) {
        if (isScalar(item)) allowedTools.push(...String(item.value ?? '').split(/\s+/).filter(Boolean))
        else problems.push({ path: '/skillMd/allowed-tools', message: 'allowed-tools lists tool names as text', ...at(item?.range?.[0]) })
      }
    } else problems.push({ path: '/skillMd/allowed-tools', message: 'allowed-tools is a space-separated string of tool names', ...at(tools.range?.[0]) })
  }

  const metadata: Record<string, string> = {}
  const meta = byKey.get('metadata')?.value
  if (meta && !(isScalar(meta) && (meta.value === null || meta.value === ''))) {
    if (!isMap(meta)) {
      problems.push({ path: '/skillMd/metadata', message: 'metadata is a mapping of names to text', ...at(meta.range?.[0]) })
    } else {
      for (const pair of meta.items as Array<Pair<Node, Node | null>>) {
        const key = isScalar(pair.key) ? String(pair.key.value) : null
        if (key === null) {
          problems.push({ path: '/skillMd/metadata', message: 'a metadata name must be plain text', ...at(pair.key?.range?.[0]) })
        } else if (pair.value !== null && !isScalar(pair.value)) {
          problems.push({ path: `/skillMd/metadata/${key}`, message: `metadata ${key} must be text, not a ${isSeq(pair.value) ? 'list' : 'mapping'}`, ...at(pair.value.range?.[0]) })
        } else {
          metadata[key] = pair.value === null ? '' : String(pair.value.value ?? '')
        }
      }
    }
  }
  if (text.includes('\u0000')) problems.push({ path: '/skillMd', message: 'a SKILL.md must not contain U+0000', line: 1, column: 1 })
  if (problems.length > 0) return { ok: false, problems }
  return { ok: true, skill: { name, description, instructions, license, compatibility, allowedTools, metadata } }
}

/**
 * The skill as a SKILL.md; parsing it gives the same fields back. Every string is written
 * quoted, so no value can read as another type or break the mapping.
 */
export function renderSkillMd(skill: SkillFields): string {
  const front: Record<string, unknown> = { name: skill.name, description: skill.description }
  if (skill.license !== null) front.license = skill.license
  if (skill.compatibility !== null) front.compatibility = skill.compatibility
  if (skill.allowedTools.length > 0) front['allowed-tools'] = skill.allowedTools.join(' ')
  if (Object.keys(skill.metadata).length > 0) front.metadata = skill.metadata
  const yaml = new Document(front).toString({ lineWidth: 0, defaultStringType: 'QUOTE_DOUBLE', defaultKeyType: 'PLAIN' })
  return `---\n${yaml}---\n\n${skill.instructions}${skill.instructions === '' ? '' : '\n'}`
}
