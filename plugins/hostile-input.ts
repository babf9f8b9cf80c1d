import type { ErrorObject, ValidateFunction } from 'ajv'

/**
 * Strings holding U+0000 or a lone surrogate, and JSON nested deeper than 64
 * levels, are refused as `400 validation_failed` before any handler sees them. Postgres
 * cannot store U+0000 in text or jsonb, a lone surrogate is not valid UTF-8 there either,
 * and deep nesting exhausts the stack of whatever walks the value next (Postgres' jsonb
 * input, the driver's serializer), so each of these used to end as a 500 somewhere deep.
 *
 * The check wraps every compiled request validator (body, querystring, params), so it
 * covers every route with a schema, runs only on the parts a route declares, and costs a
 * read without a body a scan of its few parameter strings.
 */

export const MAX_DEPTH = 64

/** Ajv's error shape, as plugins/errors.ts `describeError` turns it into `details`. */
export interface HostileInputError {
  instancePath: string
  schemaPath: string
  keyword: 'hostileInput'
  params: Record<string, never>
  message: string
}

// U+0000, a high surrogate not followed by a low one, or a low one not preceded by a high one
const REFUSED = /\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

function refusedString(s: string): string | null {
  if (!REFUSED.test(s)) return null
  return s.includes('\0') ? 'must not contain U+0000' : 'must not contain a lone surrogate (unpaired U+D800 to U+DFFF)'
}

interface Found {
  /** property names and indexes from the root, innermost last */
  segments: string[]
  message: string
}

function walk(value: unknown, depth: number): Found | null {
  if (typeof value === 'string') {
    const message = refusedString(value)
    return message === null ? null : { segments: [], message }
  }
  if (value === null || typeof value !== 'object') return null
  if (depth > MAX_DEPTH) return { segments: [], message: `must not be nested deeper than ${MAX_DEPTH} levels` }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = walk(value[i], depth + 1)
      if (found) {
        found.segments.unshift(String(i))
        return found
      }
    }
    return null
  }
  // parsed JSON and query objects: own enumerable properties only (query objects have no prototype)
  for (const key in value) {
    const keyMessage = refusedString(key)
    const found =
      keyMessage === null
        ? walk((value as Record<string, unknown>)[key], depth + 1)
        : { segments: [], message: `property name ${keyMessage}` }
    if (found) {
      found.segments.unshift(key)
      return found
    }
  }
  return null
}

/**
 * A JSON pointer segment (RFC 6901), with the refused characters written as escapes so no NUL reaches a body or a log.
 */
function pointerSegment(segment: string): string {
  return segment
    .replace(/~/g, '~0')
    .replace(/\//g, '~1')
    .replace(/[\0\ud800-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** The first refused string or nesting in a parsed request part, as a validation error; null when there is none. */
export function findHostileInput(value: unknown): HostileInputError | null {
  const found = walk(value, 1)
  if (found === null) return null
  return {
    instancePath: found.segments.map((s) => `/${pointerSegment(s)}`).join(''),
    schemaPath: '',
    keyword: 'hostileInput',
    params: {},
    message: found.message
  }
}

/** Wraps a compiled Ajv validator so refused input fails it before the schema runs. */
export function refusingHostileInput(validate: ValidateFunction): ValidateFunction {
  const guarded = function (data: unknown, context?: Parameters<ValidateFunction>[1]) {
    const hostile = findHostileInput(data)
    if (hostile !== null) {
      guarded.errors = [hostile as ErrorObject]
      return false
    }
    const result = validate(data, context)
    guarded.errors = validate.errors
    return result
  } as ValidateFunction
  // Fastify hands the parent object (for root coercion) only to a validator that carries Ajv's schemaEnv
  guarded.schemaEnv = validate.schemaEnv
  guarded.schema = validate.schema
  return guarded
}
