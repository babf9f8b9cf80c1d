import { Type } from 'typebox'
import { CreatedBy, IsoDate, named, Nullable, Page, PageQuery, StrictObject } from './common.js'

/** An MCP server's name: what its tools are offered to runs under (`mcp__<name>__<tool>`). */
export const MCP_SERVER_NAME = '^[a-z0-9_-]{1,32}$'
/** a run's name for one tool of a connected MCP server */
export const MCP_TOOL_PREFIX = 'mcp__'

export const McpServerTool = named(
  'McpServerTool',
  Type.Object(
    {
      name: Type.String({ description: "the tool's name on its server; runs see it as mcp__<server>__<name>" }),
      description: Nullable(Type.String())
    },
    { description: 'a tool the server listed at its last successful check' }
  )
)

export const McpServer = named(
  'McpServer',
  Type.Object(
    {
      id: Type.String(),
      name: Type.String({ description: 'unique in the org; its tools are offered to runs as mcp__<name>__<tool>' }),
      url: Type.String({ description: "the server's Streamable HTTP endpoint" }),
      headerNames: Type.Array(Type.String(), {
        description:
          'the names of the headers sent with every request; their values are sealed as secrets and never returned'
      }),
      ready: Type.Boolean({
        description: 'the last connection (a check, a run start, the background check) listed its tools'
      }),
      lastError: Nullable(
        Type.String({ description: 'why the last connection failed, as a sentence; null when it succeeded' })
      ),
      tools: Type.Array(McpServerTool),
      warnings: Type.Array(Type.String(), {
        description:
          'why some listed tools are not offered to runs, one sentence each (a name a model API would refuse once prefixed mcp__<server>__, a name listed twice)'
      }),
      lastCheckedAt: Nullable(IsoDate),
      failingSince: Nullable(
        Type.String({
          format: 'date-time',
          description: 'when its current run of failed connections began; null while it answers'
        })
      ),
      nextCheckAt: Nullable(
        Type.String({
          format: 'date-time',
          description:
            'when the background check tries it again; until then run starts do not wait on it (its tools are not offered); null while it answers'
        })
      ),
      createdAt: IsoDate,
      updatedAt: IsoDate,
      createdBy: CreatedBy
    },
    { description: 'an MCP server of the org whose tools runs may call' }
  )
)

const HeaderName = Type.String({ minLength: 1, maxLength: 128, pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$" })
export const CreateMcpServerBody = named(
  'CreateMcpServerRequest',
  StrictObject({
    name: Type.String({
      pattern: MCP_SERVER_NAME,
      minLength: 1,
      maxLength: 32,
      description: '1 to 32 of a-z, 0-9, _ and -, without __ and not ending with _; unique in the org'
    }),
    url: Type.String({
      minLength: 1,
      maxLength: 2048,
      pattern: '^[Hh][Tt][Tt][Pp][Ss]?://',
      description:
        "the server's Streamable HTTP endpoint; its host must not resolve to a link-local, metadata, loopback or private address (the last two allowed with PROVIDER_ALLOW_PRIVATE=true)"
    }),
    headers: Type.Optional(
      Type.Record(HeaderName, Type.String({ minLength: 1, maxLength: 8192, pattern: '^[^\\r\\n]*$' }), {
        maxProperties: 20,
        description:
          'headers sent with every request (an Authorization token, an API key); sealed as secrets, never returned'
      })
    )
  })
)

export const McpServerEnvelope = Type.Object({ server: McpServer })
export const McpServerPage = named('McpServerPage', Page(McpServer))
export const ListMcpServersQuery = StrictObject({ ...PageQuery })

/** What `/api/mcp` takes: one JSON-RPC message or a batch, read by the MCP SDK (never by the schema validator). */
export const McpMessage = named(
  'McpMessage',
  Type.Unknown({
    description:
      'a JSON-RPC 2.0 message of the Model Context Protocol (or a batch of them); a malformed one is answered with a JSON-RPC error'
  })
)
/** A POST's answer: the transport answers in JSON (never as a stream), one message or a batch. */
export const McpAnswer = {
  description: 'the JSON-RPC answer to the message (an array of answers for a batch)',
  content: { 'application/json': { schema: McpMessage } }
}
/** A GET's answer: the session's event stream. */
export const McpStream = {
  description:
    "the session's event stream (SSE) whose every `event: message` frame carries one McpMessage as its `data:`",
  content: {
    'text/event-stream': {
      schema: McpMessage,
      'x-sse-events': { message: { $ref: '#/components/schemas/McpMessage' } }
    }
  }
}
export const McpHeaders = Type.Object({
  'mcp-session-id': Type.Optional(
    Type.String({ maxLength: 128, description: 'the session id the initialize answer gave' })
  ),
  'mcp-protocol-version': Type.Optional(Type.String({ maxLength: 32 }))
})

/** How the MCP transport refuses a request: a JSON-RPC error, not the API's `{error, message}`. */
export const McpError = named(
  'McpError',
  Type.Object(
    {
      jsonrpc: Type.Literal('2.0'),
      error: Type.Object({
        code: Type.Integer({
          description:
            'the JSON-RPC error code: -32700 not JSON or not JSON-RPC, -32600 an invalid request, -32000 a transport refusal (a missing Mcp-Session-Id, an unsupported protocol version, Accept or Content-Type), -32001 no such session'
        }),
        message: Type.String({ description: 'what was wrong, as a sentence' }),
        data: Type.Optional(Type.Unknown())
      }),
      id: Type.Union([Type.String(), Type.Number(), Type.Null()], {
        description: "the refused request's id, null when it is not known"
      })
    },
    { description: 'a JSON-RPC 2.0 error: how /api/mcp refuses a request its transport cannot take' }
  )
)

const mcpError = (description: string) => ({ description, content: { 'application/json': { schema: McpError } } })
const errorBody = (description: string) => ({
  description,
  content: { 'application/json': { schema: Type.Ref('ErrorBody') } }
})
/** an answer that is either, by where the request was refused */
const eitherError = (description: string) => ({
  description,
  content: { 'application/json': { schema: Type.Union([McpError, Type.Ref('ErrorBody')]) } }
})

/**
 * What `/api/mcp` answers besides its successes, as it answers them: the API's `{error, message}`
 * before the request reaches the MCP transport (no credentials, too large a body), a JSON-RPC
 * error from the transport (and for a missing or unknown session). 400, 401, 403, 404 and 500
 * always; the others named.
 */
export function mcpErrorAnswers(...statuses: Array<406 | 413 | 415>) {
  const all = {
    400: eitherError(
      'a JSON-RPC error (McpError) when the transport refuses the request: Mcp-Session-Id is missing, the message is not JSON or not JSON-RPC, or the protocol version is not supported; `validation_failed` (ErrorBody) when a header breaks its schema'
    ),
    401: errorBody('`unauthorized`: no session, key or dev-org access'),
    403: errorBody('the request was refused before it reached the MCP transport (a foreign Origin)'),
    404: mcpError('a JSON-RPC error (McpError, code -32001): no such session for this caller; initialize again'),
    406: mcpError('a JSON-RPC error (McpError): Accept does not name the answer types the transport sends'),
    413: errorBody('`payload_too_large`: the body is larger than BODY_LIMIT'),
    415: eitherError(
      'a JSON-RPC error (McpError): Content-Type is not application/json; `unsupported_media_type` (ErrorBody) for a compressed body (Content-Encoding other than identity)'
    ),
    500: errorBody('an unexpected failure')
  }
  const out: Partial<typeof all> = {}
  for (const status of [400, 401, 403, 404, ...statuses, 500] as const) Object.assign(out, { [status]: all[status] })
  return out
}
