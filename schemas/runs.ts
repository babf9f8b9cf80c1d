import { Type } from 'typebox'
import { Id, IsoDate, PageQuery, Page, StrictObject } from './common.js'

export const RunStatus = Type.Union([Type.Literal('queued'), Type.Literal('running'), Type.Literal('succeeded'), Type.Literal('failed'), Type.Literal('cancelled')])
export const RunOrigin = Type.Union([Type.Literal('web'), Type.Literal('api'), Type.Literal('dev'), Type.Literal('skill'), Type.Literal('automation'), Type.Literal('chatplatform')])

export const Run = Type.Object({
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
  metadata: Type.Record(Type.String(), Type.Unknown())
}, { description: 'a run (contract 5)' })

export const RunEnvelope = Type.Object({ run: Run })

/** `origin`, `orgId`, `userId` are the server's: unknown fields are a 400. */
export const CreateRunBody = StrictObject({
  prompt: Type.String({ minLength: 1, maxLength: 100_000 }),
  engine: Type.Optional(Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9_-]+$' })),
  model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  rootRunId: Type.Optional(Id),
  metadata: Type.Optional(Type.Record(Type.String({ maxLength: 100 }), Type.Unknown(), { maxProperties: 50 }))
})

export const RunIdParams = StrictObject({ id: Id })
export const RootRunIdParams = StrictObject({ rootRunId: Id })

export const ListRunsQuery = StrictObject({
  ...PageQuery,
  status: Type.Optional(RunStatus),
  rootRunId: Type.Optional(Id)
})
export const RunPage = Page(Run)

export const Thread = Type.Object({
  rootRunId: Type.String(),
  title: Type.String({ description: 'the root run prompt, cut to 200 characters' }),
  runCount: Type.Integer(),
  latestRunId: Type.String(),
  latestStatus: RunStatus,
  createdAt: IsoDate,
  updatedAt: IsoDate
})
export const ThreadPage = Page(Thread)
export const ListThreadsQuery = StrictObject({ ...PageQuery })
export const ThreadDetail = Type.Object({ thread: Thread, runs: Type.Array(Run) })

export const SseHeaders = Type.Object({
  'last-event-id': Type.Optional(Type.String({ maxLength: 32, description: 'resume after this event id' }))
})
export const EventStream = Type.String({
  description: 'text/event-stream: frames `id:` (event id), `event:` (type), `data:` (JSON)'
})

export const ChatMessage = StrictObject({
  role: Type.Union([Type.Literal('system'), Type.Literal('user'), Type.Literal('assistant')]),
  content: Type.String({ maxLength: 100_000 })
})
export const ChatBody = StrictObject({
  messages: Type.Array(ChatMessage, { minItems: 1, maxItems: 200 }),
  model: Type.Optional(Type.String({ minLength: 1, maxLength: 200 }))
})
