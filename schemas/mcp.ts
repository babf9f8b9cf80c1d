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
export const McpAnswer = {
  description:
    'a JSON-RPC answer, as JSON or as an SSE stream (the MCP Streamable HTTP transport) whose every `event: message` frame carries one McpMessage as its `data:`',
  content: {
    'application/json': { schema: McpMessage },
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
