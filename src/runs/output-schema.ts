import Ajv, { type ValidateFunction } from 'ajv'
import { RE2JS } from 're2js'

// A run's structured-output schema is the caller's and is run over the model's output, which
// the caller may steer through the prompt: nothing in it may take more than linear time or
// unbounded depth. Its patterns run on RE2 (no backtracking, so no lookarounds and no
// backreferences), its references stay inside the schema and never lead back into themselves,
// and its nesting, with references followed, is bounded. The output itself is checked off the
// event loop with a time limit (output-check.ts).

/** How deep a schema may nest (objects and arrays, references followed). */
export const SCHEMA_MAX_DEPTH = 64
/** How deep an output checked against a schema may nest (objects and arrays). */
export const OUTPUT_MAX_DEPTH = 128

/** Keywords whose values are data, not schemas: a `$ref` or `pattern` there means nothing. */
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples'])
/** Keywords whose values map names (of properties, of definitions) to schemas: a key there is a name, not a keyword. */
const NAME_MAPS = new Set([
  'properties',
  'patternProperties',
  '$defs',
  'definitions',
  'dependentSchemas',
  'dependencies'
])

interface LinearRegExp {
  test(input: string): boolean
  toString(): string
}

/** Ajv's `pattern` engine: RE2, which matches in time linear in the input. */
const linearRegExp = Object.assign(
  (pattern: string): LinearRegExp => {
    const rx = RE2JS.compile(RE2JS.translateRegExp(pattern))
    // Ajv keeps one compiled pattern per distinct `toString()`
    return { test: (input: string) => rx.test(input), toString: () => `re2:${pattern}` }
  },
  { code: 'linearRegExp' }
)

/** Why a pattern cannot be used, or null. */
function patternRefusal(pattern: string): string | null {
  try {
    new RegExp(pattern, 'u')
  } catch (err) {
    return `the pattern ${JSON.stringify(pattern)} is not a regular expression: ${(err as Error).message}`
  }
  try {
    linearRegExp(pattern)
  } catch (err) {
    const reason = (err as Error).message.replace(/^error parsing regexp: /, '')
    return `the pattern ${JSON.stringify(pattern)} cannot be matched in linear time (lookarounds, backreferences and repeat counts over 1000 are not supported): ${reason}`
  }
  return null
}

class Refused extends Error {}

/** The node a local JSON pointer (`#/a/b`) names in the schema, or undefined. */
function resolvePointer(root: unknown, ref: string): unknown {
  let node = root
  for (const raw of ref.slice(2).split('/')) {
    let part: string
    try {
      part = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~')
    } catch {
      return undefined
    }
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, part)) return undefined
    node = (node as Record<string, unknown>)[part]
  }
  return node
}

/**
 * Why a structured-output schema is refused at dispatch, or null: a pattern RE2 cannot run,
 * a reference that leaves the schema or leads back into itself (`{"$ref": "#"}`), or nesting
 * deeper than SCHEMA_MAX_DEPTH with references followed.
 */
export function schemaRefusal(schema: Record<string, unknown>): string | null {
  // the expanded depth of each reference's target, once known (a target used many times is walked once)
  const depths = new Map<object, number>()
  // the targets being expanded: meeting one again is a loop
  const expanding = new Set<object>()
  const walk = (node: unknown, depth: number, top: boolean, names = false): number => {
    if (depth > SCHEMA_MAX_DEPTH)
      throw new Refused(`the schema nests deeper than ${SCHEMA_MAX_DEPTH} levels (references followed)`)
    if (node === null || typeof node !== 'object') return depth
    let deepest = depth
    if (Array.isArray(node)) {
      for (const item of node) deepest = Math.max(deepest, walk(item, depth + 1, false))
      return deepest
    }
    for (const [key, value] of Object.entries(node)) {
      if (names) {
        deepest = Math.max(deepest, walk(value, depth + 1, false))
        continue
      }
      if (DATA_KEYWORDS.has(key)) continue
      if (typeof value === 'string') {
        if (key === 'pattern') {
          const refused = patternRefusal(value)
          if (refused) throw new Refused(refused)
        } else if (key === '$ref') {
          deepest = Math.max(deepest, followRef(value, depth))
        } else if (key === '$dynamicRef' || key === '$recursiveRef') {
          throw new Refused(`${key} is not accepted: a schema may not refer to itself`)
        } else if (key === '$id' && !top) {
          throw new Refused(`a nested $id (${JSON.stringify(value.slice(0, 100))}) is not accepted`)
        }
        continue
      }
      if (key === 'patternProperties' && value !== null && typeof value === 'object') {
        for (const pattern of Object.keys(value)) {
          const refused = patternRefusal(pattern)
          if (refused) throw new Refused(refused)
        }
      }
      deepest = Math.max(deepest, walk(value, depth + 1, false, NAME_MAPS.has(key)))
    }
    return deepest
  }
  const followRef = (ref: string, depth: number): number => {
    const shown = JSON.stringify(ref.slice(0, 200))
    if (ref === '#' || ref === '#/')
      throw new Refused(`the $ref ${shown} refers to the whole schema: recursive schemas are not accepted`)
    if (!ref.startsWith('#/'))
      throw new Refused(`the $ref ${shown} leaves the schema: only references inside it (#/…) are accepted`)
    const target = resolvePointer(schema, ref)
    if (target === undefined) throw new Refused(`the $ref ${shown} points at nothing in the schema`)
    if (target === null || typeof target !== 'object') return depth
    if (expanding.has(target) || target === schema)
      throw new Refused(`the $ref ${shown} leads back into itself: recursive schemas are not accepted`)
    let below = depths.get(target)
    if (below === undefined) {
      expanding.add(target)
      below = walk(target, 0, false)
      expanding.delete(target)
      depths.set(target, below)
    }
    if (depth + below > SCHEMA_MAX_DEPTH)
      throw new Refused(`the schema nests deeper than ${SCHEMA_MAX_DEPTH} levels (references followed)`)
    return depth + below
  }
  try {
    walk(schema, 0, true)
    return null
  } catch (err) {
    if (err instanceof Refused) return err.message
    throw err
  }
}

const compiled = new Map<string, ValidateFunction>()

/** A compiled validator (kept for the schemas in use), or why the schema is not usable. */
export function compileSchema(schema: Record<string, unknown>): ValidateFunction | string {
  const key = JSON.stringify(schema)
  const cached = compiled.get(key)
  if (cached) return cached
  try {
    // an instance per schema: a `$id` of one run's schema never clashes with another's;
    // no formats and no loader, so a schema is only what it says (no remote references);
    // patterns run on RE2
    const validate = new Ajv.default({ allErrors: false, strict: false, code: { regExp: linearRegExp } }).compile(
      schema
    )
    if (compiled.size >= 200) compiled.delete(compiled.keys().next().value!)
    compiled.set(key, validate)
    return validate
  } catch (err) {
    return (err as Error).message.slice(0, 300)
  }
}

/** Whether a parsed JSON value nests deeper than `max` (objects and arrays), without recursion. */
function deeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]]
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!
    if (node === null || typeof node !== 'object') continue
    if (depth + 1 > max) return true
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1])
    }
  }
  return false
}

/**
 * An output checked against a `json_schema` format: null when it holds, else the run's
 * `error` (`output_invalid: …`, naming the first violation). Runs in the output-check thread.
 */
export function schemaViolation(schema: Record<string, unknown>, output: string): string | null {
  let value: unknown
  try {
    value = JSON.parse(output)
  } catch {
    return 'output_invalid: the output is not JSON'
  }
  if (deeperThan(value, OUTPUT_MAX_DEPTH))
    return `output_invalid: the output nests deeper than ${OUTPUT_MAX_DEPTH} levels`
  const validate = compileSchema(schema)
  if (typeof validate === 'string') return `output_invalid: the schema no longer compiles: ${validate}`
  if (validate(value)) return null
  const first = validate.errors?.[0]
  return `output_invalid: ${first ? `${first.instancePath || '/'} ${first.message ?? 'is invalid'}` : 'the output does not match the schema'}`
}
