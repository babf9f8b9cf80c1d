import { Type, type TSchema } from 'typebox'
import { Id, IsoDate, LiteralUnion, named, Page, PageQuery, StrictObject } from './common.js'
import { SecretName } from './secrets.js'

/** Run statuses and origins: the one list each (the table's CHECK is built from them). */
export const RUN_STATUSES = ['queued', 'running', 'requires_action', 'succeeded', 'failed', 'cancelled'] as const
export const RUN_ORIGINS = ['web', 'api', 'dev', 'skill', 'automation', 'chatplatform', 'mcp'] as const
export const RunStatus = named('RunStatus', LiteralUnion(RUN_STATUSES))
export const RunOrigin = named('RunOrigin', LiteralUnion(RUN_ORIGINS))

/** How the model is asked to shape its answer. */
export const ResponseFormat = named(
  'ResponseFormat',
  Type.Union(
    [
      StrictObject({ type: Type.Literal('text') }),
      StrictObject({ type: Type.Literal('json_object') }),
      StrictObject({
        type: Type.Literal('json_schema'),
        name: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
        schema: Type.Record(Type.String(), Type.Unknown(), {
          description: 'a JSON Schema (at most 64 KB); the run succeeds only when its output validates against it'
        })
      })
    ],
    { description: 'text (default), any JSON object, or JSON that validates against a schema' }
  )
)

export const RunSettings = named(
  'RunSettings',
  Type.Object(
    {
      temperature: Type.Union([Type.Number(), Type.Null()]),
      maxOutputTokens: Type.Union([Type.Integer(), Type.Null()]),
      responseFormat: Type.Union([ResponseFormat, Type.Null()]),
      tools: Type.Union([Type.Array(Type.String()), Type.Null()], {
        description: 'the tools the run may use; null: all'
      })
    },
    { description: 'what the run asked of its model; each null when not set' }
  )
)

export const RunUsage = named(
  'RunUsage',
  Type.Object(
    {
      inputTokens: Type.Integer(),
      outputTokens: Type.Integer()
    },
    { description: 'tokens over every model call of the run, as the upstream reported them' }
  )
)

export const Run = named(
  'Run',
  Type.Object(
    {
      id: Type.String(),
      rootRunId: Type.String(),
      parentRunId: Type.Union([Type.String(), Type.Null()]),
      engine: Type.String(),
      model: Type.Union([Type.String(), Type.Null()]),
      prompt: Type.String(),
      status: RunStatus,
      origin: RunOrigin,
      error: Type.Union([Type.String(), Type.Null()]),
      createdAt: IsoDate,
      startedAt: Type.Union([IsoDate, Type.Null()]),
      finishedAt: Type.Union([IsoDate, Type.Null()]),
      userId: Type.Union([Type.String(), Type.Null()]),
      metadata: Type.Record(Type.String(), Type.Unknown()),
      output: Type.Union([Type.String(), Type.Null()], {
        description: 'the final answer of a succeeded run; null otherwise (also while it runs)'
      }),
      usage: Type.Union([RunUsage, Type.Null()], { description: 'null when no model reported tokens' }),
      instructions: Type.Union([Type.String(), Type.Null()], {
        description: 'the system instructions the run was started with'
      }),
      settings: RunSettings,
      attachments: Type.Array(Type.String(), { description: "upload ids copied into the run's workspace" })
    },
    { description: 'a run' }
  )
)

export const RunEnvelope = named('RunReply', Type.Object({ run: Run }))

export const MULTITASK_MODES = ['enqueue', 'reject', 'interrupt'] as const

/** What configures the agent of a run, wherever a run is started. */
export const AgentOptions = {
  instructions: Type.Optional(
    Type.String({ minLength: 1, maxLength: 32_000, description: 'sent as the first system message' })
  ),
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
  maxOutputTokens: Type.Optional(Type.Integer({ minimum: 1, maximum: 200_000 })),
  responseFormat: Type.Optional(ResponseFormat),
  tools: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 128 }), {
      maxItems: 128,
      uniqueItems: true,
      description: 'the tools this run may use, by name (an unknown name is a 400); [] for none; absent for all'
    })
  ),
  attachments: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 64 }), {
      maxItems: 10,
      uniqueItems: true,
      description:
        "upload ids of the org (another org's or an unknown one is a 404): copied into the run's workspace under attachments/<file name> before it starts, listed in the model's user message (text files up to 32 KB inlined)"
    })
  )
}

/** `origin`, `orgId`, `userId` are the server's: unknown fields are a 400. */
export const CreateRunBody = named(
  'CreateRunRequest',
  StrictObject({
    prompt: Type.String({ minLength: 1, maxLength: 100_000 }),
    engine: Type.Optional(Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9_-]+$' })),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    rootRunId: Type.Optional(Id),
    metadata: Type.Optional(Type.Record(Type.String({ maxLength: 100 }), Type.Unknown(), { maxProperties: 50 })),
    ...AgentOptions,
    multitask: Type.Optional(
      LiteralUnion(MULTITASK_MODES, {
        description:
          'with rootRunId, when a run of the thread has not ended: enqueue (default: wait for it), reject (409 thread_busy) or interrupt (cancel it)'
      })
    ),
    secrets: Type.Optional(
      Type.Array(SecretName, {
        maxItems: 50,
        uniqueItems: true,
        description:
          "org secrets the run's sandbox gets as environment variables; their values are redacted from all it stores and streams"
      })
    )
  })
)

export const RunIdParams = StrictObject({ id: Id })
export const GetRunQuery = StrictObject({
  wait: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: 60,
      description: 'seconds to wait for the run to end before answering (its state at that moment either way)'
    })
  )
})
export const RootRunIdParams = StrictObject({ rootRunId: Id })

export const ListRunsQuery = StrictObject({
  ...PageQuery,
  status: Type.Optional(RunStatus),
  rootRunId: Type.Optional(Id)
})
export const RunPage = named('RunPage', Page(Run))

export const Thread = named(
  'Thread',
  Type.Object({
    rootRunId: Type.String(),
    title: Type.String({ description: 'the root run prompt, cut to 200 characters' }),
    runCount: Type.Integer(),
    latestRunId: Type.String(),
    latestStatus: RunStatus,
    createdAt: IsoDate,
    updatedAt: IsoDate
  })
)
export const ThreadPage = named('ThreadPage', Page(Thread))
export const ListThreadsQuery = StrictObject({ ...PageQuery })
/** One message of a run's transcript (its model conversation after the system messages). */
export const RunMessage = named(
  'RunMessage',
  Type.Object(
    {
      role: LiteralUnion(['user', 'assistant', 'tool'] as const),
      content: Type.String({
        description:
          "the message's text: the user message as sent (attachments listed), the assistant's text (empty when it only called tools), a tool's result as the model saw it"
      }),
      toolCalls: Type.Optional(
        Type.Array(
          Type.Object({
            id: Type.String(),
            name: Type.String(),
            arguments: Type.String({ description: 'the arguments as the model wrote them (JSON text)' })
          }),
          { description: "an assistant message's tool calls, each answered by a `tool` message after it" }
        )
      ),
      toolCallId: Type.Optional(Type.String({ description: 'a tool message: the call it answers' })),
      name: Type.Optional(Type.String({ description: 'a tool message: the tool that answered' }))
    },
    { description: 'one message of a run transcript, secrets redacted' }
  )
)
export const RunMessages = named('RunMessages', Type.Object({ items: Type.Array(RunMessage) }))

/** A run of a thread, with its transcript: a thread page shows tool calls and results without the event stream. */
export const ThreadRun = named(
  'ThreadRun',
  Type.Object(
    {
      ...Run.properties,
      messages: Type.Array(RunMessage, {
        description: "the run's transcript (as `GET /api/runs/{id}/messages`); empty before the run starts"
      })
    },
    { description: 'a run of the thread and its transcript' }
  )
)
export const ThreadDetail = named('ThreadDetail', Type.Object({ thread: Thread, runs: Type.Array(ThreadRun) }))

export const SseHeaders = Type.Object({
  'last-event-id': Type.Optional(Type.String({ maxLength: 32, description: 'resume after this event id' }))
})
/** The payload of one `data:` line of a run's event stream (`event:` is its `type`, `id:` its `id`). */
export const RunEvent = named(
  'RunEvent',
  Type.Object({
    id: Type.Integer({ description: 'per-org increasing event id; send it back as Last-Event-ID to resume' }),
    runId: Type.String(),
    rootRunId: Type.String(),
    type: Type.String({
      description:
        "the frame's `event:` name: run.queued, run.started, message.delta, message.completed, tool.call, tool.result, " +
        'memory.recalled, memory.captured, artifact.created, approval.requested, approval.resolved, approval.expired, ' +
        'run.requires_action, run.succeeded, run.failed, run.cancelled, and others; ' +
        'a client skips the types it does not know'
    }),
    createdAt: IsoDate,
    data: Type.Record(Type.String(), Type.Unknown())
  })
)
/** The payload of `event: end`, the last frame of a run's event stream. */
export const RunStreamEnd = named(
  'RunStreamEnd',
  Type.Object(
    {
      runId: Type.String(),
      status: Type.Union([Type.Literal('succeeded'), Type.Literal('failed'), Type.Literal('cancelled')], {
        description: 'how the run ended'
      })
    },
    {
      description: "the payload of `event: end`, sent after the run's terminal event; the server then closes the stream"
    }
  )
)
/** The payload of `event: change` on the org change stream: identifiers only. */
export const RunChange = named(
  'RunChange',
  Type.Object({ kind: Type.Literal('run'), id: Type.String(), rootRunId: Type.String() })
)
export const ChatToken = named(
  'ChatToken',
  Type.Object({ text: Type.String() }, { description: 'the payload of `event: token`: the next piece of the answer' })
)
export const ChatDone = named(
  'ChatDone',
  Type.Object(
    {
      model: Type.Union([Type.String(), Type.Null()]),
      usage: Type.Object(
        { inputTokens: Type.Integer(), outputTokens: Type.Integer() },
        { description: "the tokens the answer cost, named as a run's `usage`" }
      )
    },
    { description: 'the payload of `event: done`, the last frame of a chat that succeeded' }
  )
)

/**
 * The frames' payloads, one named type per stream: what each `data:` line decodes to.
 * Client generators read a response's `schema` and nothing else, so that is where the
 * payload goes (the stream's body is frames of these, not one JSON value); `x-sse-events`
 * says which `event:` name carries which payload, for tools that read it.
 */
export const RunStreamEvent = named(
  'RunStreamEvent',
  Type.Union([RunEvent, RunStreamEnd], {
    description:
      "a frame of a run's event stream: a RunEvent (`event:` is its `type`), or the RunStreamEnd of `event: end`"
  })
)
/** A chat cut short by the server's shutdown: nothing more comes; the request can be sent again (to any instance). */
export const ChatEnd = named(
  'ChatEnd',
  Type.Object(
    { reason: Type.Literal('shutting_down'), message: Type.String() },
    {
      description: 'the payload of `event: end`: the server shut down before the answer ended; send the request again'
    }
  )
)
export const ChatStreamEvent = named(
  'ChatStreamEvent',
  Type.Union([ChatToken, ChatDone, ChatEnd, Type.Ref('ErrorBody')], {
    description:
      'a frame of a chat: a ChatToken (`event: token`), then a ChatDone (`event: done`), an ErrorBody (`event: error`) or, when the server shuts down first, a ChatEnd (`event: end`, with `retry:`)'
  })
)

/**
 * A `text/event-stream` answer, for the OpenAPI document: frames of `id:`, `event:` and
 * `data:` (one JSON payload per frame); `schema` is the payload of one frame.
 */
function eventStream(description: string, payload: TSchema, events: Record<string, string>) {
  const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })
  return {
    description,
    content: {
      'text/event-stream': {
        schema: payload,
        'x-sse-events': Object.fromEntries(Object.entries(events).map(([event, name]) => [event, ref(name)]))
      }
    }
  }
}

export const RunEventStream = eventStream(
  'an event stream: frames `id:` (event id), `event:` (its type) and `data:` (a RunEvent, as JSON); `event: end` (a RunStreamEnd) after the terminal event; heartbeat comments',
  RunStreamEvent,
  { '*': 'RunEvent', end: 'RunStreamEnd' }
)
export const ThreadEventStream = eventStream(
  'an event stream: frames `id:` (event id), `event:` (its type) and `data:` (a RunEvent, as JSON); it has no end; heartbeat comments',
  RunEvent,
  { '*': 'RunEvent' }
)
export const RunChangeStream = eventStream(
  'an event stream: frames `id:`, `event: change` and `data:` (a RunChange, as JSON); heartbeat comments',
  RunChange,
  { change: 'RunChange' }
)
export const ChatStream = eventStream(
  'an event stream: frames `event: token` (`data:` a ChatToken), then `event: done` (a ChatDone) or `event: error` (an ErrorBody); when the server shuts down mid-answer, `event: end` (a ChatEnd) with `retry:`: send the request again',
  ChatStreamEvent,
  { token: 'ChatToken', done: 'ChatDone', error: 'ErrorBody', end: 'ChatEnd' }
)

export const ChatMessage = named(
  'ChatMessage',
  StrictObject({
    role: Type.Union([Type.Literal('system'), Type.Literal('user'), Type.Literal('assistant')]),
    content: Type.String({ maxLength: 100_000 })
  })
)
export const ChatBody = named(
  'ChatRequest',
  StrictObject({
    messages: Type.Array(ChatMessage, { minItems: 1, maxItems: 200 }),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 }))
  })
)
