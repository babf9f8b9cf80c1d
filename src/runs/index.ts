import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import type { FastifyInstance } from 'fastify'
import { modelUnavailable, notFound } from '../../plugins/errors.js'
import { sendStored } from '../../plugins/idempotency/index.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { newId } from '../db/ids.js'
import { parseLastEventId, SHUTDOWN_END_FRAME, sseFrame, type SseStream } from '../../plugins/sse.js'
import { errorResponses, IdempotencyKeyHeader } from '../../schemas/common.js'
import {
  ChatBody,
  ChatStream,
  CreateRunBody,
  GetRunQuery,
  ListRunsQuery,
  ListThreadsQuery,
  RootRunIdParams,
  RunEnvelope,
  RunIdParams,
  RunChangeStream,
  RunEventStream,
  RunMessages,
  RunPage,
  SseHeaders,
  ThreadDetail,
  ThreadEventStream,
  ThreadPage
} from '../../schemas/runs.js'
import { EngineError, ModelUnavailable } from './engines/types.js'
import { lastEventOf, TERMINAL_EVENTS } from './events.js'
import { awaitsDecision, getRun, getThread, listRuns, listThreads, runToWire, type RunRow } from './runs-repo.js'
import { threadTranscripts, transcriptOf } from './transcripts.js'
import { changeFrame, eventFrame, isChangeEvent, isTerminal, pipeEvents } from './streams.js'
import { chatCompletions, TERMINAL_STATUSES } from './tables.js'

/**
 * The wait of `GET /api/runs/:id?wait=` and of the MCP tools' `waitSeconds`: the run once
 * it has ended or waits for a person's decision, or as it is when `ms` have passed or the
 * client went away. A `requires_action` run whose calls are all decided (or expired) is
 * waited for like a running one: it goes on by itself, so answering it at once would only
 * make the client ask again. Its terminal or `run.requires_action` event wakes the wait whichever
 * instance ran it (the event bus carries events between instances, and a resync after a
 * lost connection wakes it too); the row is read again at least every 2 s in case a
 * notification was missed.
 */
export async function waitForEnd(
  app: FastifyInstance,
  orgId: string,
  runId: string,
  ms: number,
  response: { once(event: 'close', listener: () => void): unknown; off(event: 'close', listener: () => void): unknown }
): Promise<RunRow | null> {
  let wake: () => void = () => {}
  const stops = [
    app.eventBus.subscribe(orgId, (event) => {
      if (event.runId === runId && (TERMINAL_EVENTS.has(event.type) || event.type === 'run.requires_action')) wake()
    }),
    app.eventBus.onResync(() => wake())
  ]
  let gone = false
  const onClose = () => {
    gone = true
    wake()
  }
  response.once('close', onClose)
  const deadline = Date.now() + ms
  try {
    for (;;) {
      const woken = new Promise<void>((resolve) => (wake = resolve))
      const run = await getRun(app.db, orgId, runId)
      const left = deadline - Date.now()
      if (!run || TERMINAL_STATUSES.includes(run.status) || left <= 0 || gone) return run
      // a run waiting for a person cannot end by waiting longer: it answers as it is
      if (run.status === 'requires_action' && (await awaitsDecision(app.db, orgId, runId))) return run
      let timer: NodeJS.Timeout | undefined
      await Promise.race([woken, new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.min(left, 2000))))])
      clearTimeout(timer)
    }
  } finally {
    for (const stop of stops) stop()
    response.off('close', onClose)
  }
}

/** Runs, threads, their live streams and chat. */
const runsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/runs',
    {
      config: { idempotent: true, keyAccess: 'dispatch' },
      schema: {
        operationId: 'createRun',
        tags: ['runs'],
        summary: 'Start a run (optionally in an existing thread); honours Idempotency-Key',
        description:
          "Queues a run of the prompt for the organization's engines, in a new thread or after the runs of an existing one, and answers with the queued run; a repeated Idempotency-Key replays the first answer.",
        headers: IdempotencyKeyHeader,
        body: CreateRunBody,
        response: { 201: RunEnvelope, ...errorResponses(404, 413, 429) }
      }
    },
    async (request, reply) => {
      const answer = await app.runs.dispatch({
        principal: principalOf(request),
        body: request.body,
        idempotency: request.idempotency,
        log: request.log
      })
      return sendStored(reply, answer)
    }
  )

  app.get(
    '/runs',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listRuns',
        tags: ['runs'],
        summary: 'Runs of the org, newest first',
        description:
          "Pages through the organization's runs, newest first, optionally only those of one status or one thread.",
        querystring: ListRunsQuery,
        response: { 200: RunPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const q = request.query
      const page = await listRuns(app.db, orgId, {
        status: q.status,
        rootRunId: q.rootRunId,
        limit: q.limit ?? 50,
        cursor: q.cursor
      })
      return { items: page.items.map(runToWire), nextCursor: page.nextCursor }
    }
  )

  // Registered before /runs/:id so "changes" is never read as an id.
  app.get(
    '/runs/changes',
    {
      config: { keyAccess: 'read' },
      exposeHeadRoute: false,
      schema: {
        operationId: 'streamRunChanges',
        tags: ['runs'],
        summary: 'SSE: `event: change` with `{kind, id, rootRunId}` for every run change in the org; starts live',
        description:
          'Opens an event stream that announces, with identifiers only, every run of the organization that changes from now on, on whichever instance it changed.',
        headers: SseHeaders,
        response: { 200: RunChangeStream, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const stream = app.sse.open(request, reply)
      await pipeEvents(app, {
        orgId,
        stream,
        match: isChangeEvent,
        history: { changesOnly: true },
        replayAll: false,
        frame: changeFrame
      })
    }
  )

  app.get(
    '/runs/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getRun',
        tags: ['runs'],
        summary: 'One run; with `wait=N`, answers when the run has ended or after N seconds, whichever comes first',
        description:
          "Returns one run of the organization; with `wait` it holds the request until the run ends, waits for a person's decision on a tool call, or the seconds pass (a run whose calls are all decided is waited for until it goes on).",
        params: RunIdParams,
        querystring: GetRunQuery,
        response: { 200: RunEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const wait = request.query.wait ?? 0
      const run =
        wait > 0
          ? await waitForEnd(app, orgId, request.params.id, wait * 1000, reply.raw)
          : await getRun(app.db, orgId, request.params.id)
      if (!run) throw notFound('no such run in this organization')
      return { run: runToWire(run) }
    }
  )

  app.get(
    '/runs/:id/messages',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getRunMessages',
        tags: ['runs'],
        summary: "A run's transcript: its model conversation, tool calls and results included",
        description:
          "Returns every message of the run's model conversation in order: its user message (attachments listed), each assistant message with the text it wrote before calling tools and its tool calls, each tool result as the model saw it, and the final answer. Secrets are redacted; the transcript is kept with the run, whatever the event retention.",
        params: RunIdParams,
        response: { 200: RunMessages, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const run = await getRun(app.db, orgId, request.params.id)
      if (!run) throw notFound('no such run in this organization')
      return { items: await transcriptOf(app.db, orgId, run.id) }
    }
  )

  app.post(
    '/runs/:id/cancel',
    {
      config: { keyAccess: 'dispatch' },
      schema: {
        operationId: 'cancelRun',
        tags: ['runs'],
        summary: 'Cancel a run (idempotent): queued runs stop at once, running ones within a second',
        description:
          'Asks a run to stop: a queued run is cancelled at once, a running one within a second, and a run that already ended is returned as it is.',
        params: RunIdParams,
        response: { 200: RunEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const run = await app.runs.cancel(orgId, request.params.id)
      if (!run) throw notFound('no such run in this organization')
      return { run: runToWire(run) }
    }
  )

  app.get(
    '/runs/:id/events',
    {
      config: { keyAccess: 'read' },
      exposeHeadRoute: false,
      schema: {
        operationId: 'streamRunEvents',
        tags: ['runs'],
        summary:
          "SSE: the run's events (history first, then live), ending with `event: end`; 204 when a finished run is resumed after its last event",
        description:
          "Streams a run's stored events from the start (or after Last-Event-ID) and then live ones, ending with `event: end` after the terminal event.",
        params: RunIdParams,
        headers: SseHeaders,
        response: {
          200: RunEventStream,
          204: {
            type: 'null',
            description: 'the run finished and Last-Event-ID is its last event: nothing more will come'
          },
          ...errorResponses(404)
        }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const runId = request.params.id
      const run = await getRun(app.db, orgId, runId)
      if (!run) throw notFound('no such run in this organization')
      // a client that already has the terminal event gets 204, which stops an EventSource
      // from reconnecting forever; thread-events has no such end, as a thread
      // can always get another run
      const lastEventId = parseLastEventId(request)
      if (lastEventId !== null && TERMINAL_STATUSES.includes(run.status)) {
        const last = await lastEventOf(app.db, orgId, runId)
        if (last === null || (TERMINAL_EVENTS.has(last.type) && lastEventId >= last.id))
          return reply.code(204).send(null)
      }
      const stream = app.sse.open(request, reply)
      const end = (status: string) => {
        stream.write(sseFrame('end', JSON.stringify({ runId, status })))
        stream.close()
      }
      await pipeEvents(app, {
        orgId,
        stream,
        match: (event) => event.runId === runId,
        history: { runId },
        replayAll: true,
        frame: eventFrame,
        after(event) {
          if (!isTerminal(event)) return false
          stream.write(sseFrame('end', JSON.stringify({ runId, status: event.type.slice(4) })))
          return true
        },
        async caughtUp() {
          // resumed after the terminal event: nothing more will come
          const now = await getRun(app.db, orgId, runId)
          if (now && TERMINAL_STATUSES.includes(now.status) && !stream.closed) end(now.status)
        }
      })
    }
  )

  app.get(
    '/runs/:rootRunId/thread-events',
    {
      config: { keyAccess: 'read' },
      exposeHeadRoute: false,
      schema: {
        operationId: 'streamThreadEvents',
        tags: ['runs'],
        summary: 'SSE: every event of every run of one thread, in order (history first, then live)',
        description:
          'Streams the events of every run in a thread in the order they were stored, history first, then live; the stream has no end since a thread can get more runs.',
        params: RootRunIdParams,
        headers: SseHeaders,
        response: { 200: ThreadEventStream, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const { rootRunId } = request.params
      const root = await getRun(app.db, orgId, rootRunId)
      if (!root || root.rootRunId !== rootRunId) throw notFound('no such thread in this organization')
      const stream = app.sse.open(request, reply)
      await pipeEvents(app, {
        orgId,
        stream,
        match: (event) => event.rootRunId === rootRunId,
        history: { rootRunId },
        replayAll: true,
        frame: eventFrame
      })
    }
  )

  app.get(
    '/threads',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listThreads',
        tags: ['runs'],
        summary: 'Threads of the org, newest first',
        description:
          "Pages through the organization's threads (a root run and the runs that continue it), newest first.",
        querystring: ListThreadsQuery,
        response: { 200: ThreadPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      return listThreads(app.db, orgId, { limit: request.query.limit ?? 50, cursor: request.query.cursor })
    }
  )

  app.get(
    '/threads/:rootRunId',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getThread',
        tags: ['runs'],
        summary: 'One thread and its runs, oldest first, each with its transcript',
        description:
          'Returns one thread with all of its runs, oldest first, each with its transcript (`messages`, as `GET /api/runs/{id}/messages`): tool calls and their results without replaying the event stream.',
        params: RootRunIdParams,
        response: { 200: ThreadDetail, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const found = await getThread(app.db, orgId, request.params.rootRunId)
      if (!found) throw notFound('no such thread in this organization')
      const transcripts = await threadTranscripts(app.db, orgId, request.params.rootRunId)
      return {
        thread: found.thread,
        runs: found.runs.map((run) => ({ ...runToWire(run), messages: transcripts.get(run.id) ?? [] }))
      }
    }
  )

  app.post(
    '/chat',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'chat',
        tags: ['runs'],
        summary:
          'SSE: chat completion tokens (`event: token` `{text}`, then `event: done` with usage; `event: end` if the server shuts down first)',
        description:
          "Sends the messages to the organization's default model (or the one named) and streams the answer back token by token, without starting a run; its usage is counted like a run's.",
        body: ChatBody,
        response: { 200: ChatStream, ...errorResponses(413, 503) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { orgId } = principal
      const { messages } = request.body
      const { engine, model: chosenModel } = await app.runs.chatEngine(orgId, request.body.model)
      const controller = new AbortController()
      // the stream opens with the first token: a model that cannot be reached is a 503 before it, not a 200
      let stream: SseStream | null = null
      const opened = (): SseStream => {
        if (stream) return stream
        // its tokens are not stored, so it cannot resume: at shutdown it ends, saying so (the client sends it again)
        stream = app.sse.open(request, reply, { shutdownFrame: SHUTDOWN_END_FRAME })
        // a client that goes away aborts the upstream request
        stream.onClose(() => controller.abort())
        return stream
      }
      const gone = () => {
        if (!reply.raw.writableFinished) controller.abort()
      }
      reply.raw.once('close', gone)
      const startedAt = new Date()
      let status: 'succeeded' | 'failed' | 'cancelled' = 'failed'
      let usage: { promptTokens: number; completionTokens: number } | null = null
      let refusal: ModelUnavailable | null = null
      try {
        usage = await engine.chat(messages, chosenModel, controller.signal, {
          onToken(text) {
            opened().write(sseFrame('token', JSON.stringify({ text })))
          }
        })
        status = 'succeeded'
        // named as a run's usage
        const spent = { inputTokens: usage.promptTokens, outputTokens: usage.completionTokens }
        opened().write(sseFrame('done', JSON.stringify({ model: chosenModel, usage: spent })))
      } catch (err) {
        if (controller.signal.aborted) status = 'cancelled'
        else if (err instanceof ModelUnavailable && stream === null) refusal = err
        else {
          const message = err instanceof EngineError ? err.message : 'chat failed'
          if (!(err instanceof EngineError)) request.log.error({ err }, 'chat failed')
          const error = message.startsWith('model_unavailable:') ? 'model_unavailable' : 'chat_failed'
          opened().write(sseFrame('error', JSON.stringify({ error, message })))
        }
      } finally {
        reply.raw.off('close', gone)
        ;(stream as SseStream | null)?.close()
      }
      // metered like a run: the usage rollup counts it by engine, model and user
      await app.db
        .insert(chatCompletions)
        .values({
          id: newId(),
          orgId,
          engine: engine.id,
          model: chosenModel,
          userId: realUserId(principal),
          status,
          startedAt,
          finishedAt: new Date(),
          inputTokens: usage?.promptTokens ?? null,
          outputTokens: usage?.completionTokens ?? null
        })
        .catch((err: unknown) => request.log.warn({ err }, 'chat usage not recorded'))
      if (refusal) throw modelUnavailable(refusal.message, refusal.retryAfterMs)
    }
  )
}

// started only where the services it uses are: a group app without them fails at boot, naming what is missing
export default fp(runsRoutes, {
  name: 'runs-routes',
  fastify: '5.x',
  dependencies: ['db', 'event-bus', 'sse', 'principal', 'idempotency', 'runs'],
  encapsulate: true
})
