import type { Static } from 'typebox'
import { validationFailed } from '../../plugins/errors.js'
import type { AgentOptions as AgentOptionsSchema } from '../../schemas/runs.js'
import { TOOL_NAMES } from '../../schemas/runtime.js'
import { compileSchema, schemaRefusal } from './output-schema.js'

/** `mcp__<server>__<tool>`: a tool of one of the org's MCP servers */
export const MCP_TOOL_NAME = /^mcp__[a-z0-9_-]{1,32}__[A-Za-z0-9_./-]+$/
import type { RunSettings } from './tables.js'

// What configures the agent of a run, checked once where a run is started
// (every way: runs, skills, playbooks, tasks, automations) and stored on the run.

type AgentOptionsBody = { [K in keyof typeof AgentOptionsSchema]?: Static<(typeof AgentOptionsSchema)[K]> }

const SCHEMA_MAX_BYTES = 64 * 1024

/**
 * The instructions and settings to store, from a request body; a bad tool name, a schema
 * that is too large, does not compile, holds a pattern RE2 cannot run (it is run over the
 * model's output), refers to itself or outside itself, or nests too deep
 * (output-schema.ts) is a `400 validation_failed` naming the field. `at` is the body path
 * of the options (`/body` for a run). `stored`: options checked when they were saved (an
 * automation's target) are not refused again for their schema, whose rules may have grown
 * since; a schema the output check cannot use fails the run there, within its bounds.
 */
export function agentOptionsOf(
  body: AgentOptionsBody,
  at = '/body',
  stored = false
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
    if (format.type === 'json_schema' && stored) {
      settings.responseFormat = { type: 'json_schema', name: format.name, schema: format.schema }
    } else if (format.type === 'json_schema') {
      const path = `${at}/responseFormat/schema`
      if (Buffer.byteLength(JSON.stringify(format.schema)) > SCHEMA_MAX_BYTES)
        throw validationFailed([{ path, message: 'the schema is larger than 64 KB' }])
      const refused = schemaRefusal(format.schema)
      if (refused !== null) throw validationFailed([{ path, message: refused }])
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
