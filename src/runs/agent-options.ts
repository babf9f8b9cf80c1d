import Ajv, { type ValidateFunction } from 'ajv'
import isSafeRegex from 'safe-regex2'
import type { Static } from 'typebox'
import { validationFailed } from '../../plugins/errors.js'
import type { AgentOptions as AgentOptionsSchema } from '../../schemas/runs.js'
import { TOOL_NAMES } from '../../schemas/runtime.js'

/** `mcp__<server>__<tool>`: a tool of one of the org's MCP servers */
export const MCP_TOOL_NAME = /^mcp__[a-z0-9_-]{1,32}__[A-Za-z0-9_./-]+$/
import type { RunSettings } from './tables.js'

// Contract 13.3: what configures the agent of a run, checked once where a run is started
// (every way: runs, skills, playbooks, tasks, automations) and stored on the run.

type AgentOptionsBody = { [K in keyof typeof AgentOptionsSchema]?: Static<(typeof AgentOptionsSchema)[K]> }

const SCHEMA_MAX_BYTES = 64 * 1024

/**
 * The instructions and settings to store, from a request body; a bad tool name, a schema
 * that is too large, does not compile or holds a regular expression that can run away
 * (`safe-regex2`: it is run over the model's output) is a `400 validation_failed` naming
 * the field. `at` is the body path of the options (`/body` for a run).
 */
export function agentOptionsOf(
  body: AgentOptionsBody,
  at = '/body'
): { instructions: string | null; settings: RunSettings; attachments: string[] } {
  const settings: RunSettings = {}
  if (body.temperature !== undefined) settings.temperature = body.temperature
  if (body.maxOutputTokens !== undefined) settings.maxOutputTokens = body.maxOutputTokens
  if (body.tools !== undefined) {
    const known = new Set<string>(TOOL_NAMES)
    // an MCP server's tool: whether the org has it is checked where the run is dispatched
    const unknown = body.tools.findIndex((name) => !known.has(name) && !MCP_TOOL_NAME.test(name))
    if (unknown >= 0)
      throw validationFailed([
        {
          path: `${at}/tools/${unknown}`,
          message: `no tool named ${JSON.stringify(body.tools[unknown])}; known: ${TOOL_NAMES.join(', ')} and mcp__<server>__<tool> for the tools of the organization's MCP servers`
        }
      ])
    settings.tools = [...body.tools]
  }
  const format = body.responseFormat
  if (format !== undefined) {
    if (format.type === 'json_schema') {
      const path = `${at}/responseFormat/schema`
      if (Buffer.byteLength(JSON.stringify(format.schema)) > SCHEMA_MAX_BYTES)
        throw validationFailed([{ path, message: 'the schema is larger than 64 KB' }])
      const unsafe = unsafePattern(format.schema)
      if (unsafe !== null)
        throw validationFailed([
          { path, message: `the pattern ${JSON.stringify(unsafe)} can take exponential time; simplify it` }
        ])
      const compiled = compileSchema(format.schema)
      if (typeof compiled === 'string')
        throw validationFailed([{ path, message: `not a usable JSON Schema: ${compiled}` }])
      settings.responseFormat = { type: 'json_schema', name: format.name, schema: format.schema }
    } else {
      settings.responseFormat = { type: format.type }
    }
  }
  return {
    instructions: body.instructions ?? null,
    settings,
    attachments: body.attachments ? [...body.attachments] : []
  }
}

/** The first `pattern` or `patternProperties` key of a schema that safe-regex2 finds unsafe, or null. */
function unsafePattern(node: unknown): string | null {
  if (Array.isArray(node)) {
    for (const item of node) {
      const found = unsafePattern(item)
      if (found !== null) return found
    }
    return null
  }
  if (node === null || typeof node !== 'object') return null
  for (const [key, value] of Object.entries(node)) {
    if (key === 'pattern' && typeof value === 'string' && !safe(value)) return value
    if (key === 'patternProperties' && value !== null && typeof value === 'object') {
      for (const pattern of Object.keys(value)) if (!safe(pattern)) return pattern
    }
    const found = unsafePattern(value)
    if (found !== null) return found
  }
  return null
}

function safe(pattern: string): boolean {
  try {
    new RegExp(pattern, 'u')
  } catch {
    return false
  }
  return isSafeRegex(pattern)
}

const compiled = new Map<string, ValidateFunction>()

/** A compiled validator (kept for the schemas in use), or why the schema is not usable. */
export function compileSchema(schema: Record<string, unknown>): ValidateFunction | string {
  const key = JSON.stringify(schema)
  const cached = compiled.get(key)
  if (cached) return cached
  try {
    // an instance per schema: a `$id` of one run's schema never clashes with another's;
    // no formats and no loader, so a schema is only what it says (no remote references)
    const validate = new Ajv.default({ allErrors: false, strict: false }).compile(schema)
    if (compiled.size >= 200) compiled.delete(compiled.keys().next().value!)
    compiled.set(key, validate)
    return validate
  } catch (err) {
    return (err as Error).message.slice(0, 300)
  }
}

/**
 * Checks a succeeded run's output against its response format: null when it holds, else
 * the run's `error` (`output_invalid: …`, naming the first violation).
 */
export function outputViolation(settings: RunSettings, output: string): string | null {
  const format = settings.responseFormat
  if (!format || format.type === 'text') return null
  let value: unknown
  try {
    value = JSON.parse(output)
  } catch {
    return 'output_invalid: the output is not JSON'
  }
  if (format.type === 'json_object') {
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? null
      : 'output_invalid: the output is not a JSON object'
  }
  const validate = compileSchema(format.schema)
  if (typeof validate === 'string') return `output_invalid: the schema no longer compiles: ${validate}`
  if (validate(value)) return null
  const first = validate.errors?.[0]
  return `output_invalid: ${first ? `${first.instancePath || '/'} ${first.message ?? 'is invalid'}` : 'the output does not match the schema'}`
}
