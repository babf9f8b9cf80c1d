// What every model protocol shares: one streamed call's shape, the idle timeout, the
// retries before the first token and the run's tool loop. The protocols
// themselves (openai.ts, anthropic.ts) only turn a call into their SDK's request and back.
import type { RunSettings, SuspendedRun } from '../tables.js'
import { backoffDelay } from '../../worker-loop.js'
import { observeModelCall } from '../../telemetry/genai.js'
import { ModelBreakers } from './breaker.js'
import { emptyAnswerText, ownMessages } from '../transcripts.js'
import {
  abortable,
  EngineError,
  ModelUnavailable,
  RunSuspended,
  type Engine,
  type EngineContext,
  type ToolCall,
  type ToolDefinition,
  type WireMessage
} from './types.js'

/** Answers a model call is retried after, before its first token (529: Anthropic's "overloaded"). */
const RETRYABLE = new Set([429, 500, 502, 503, 504, 529])
/** the longest wait a `Retry-After` may ask for */
const RETRY_AFTER_MAX_MS = 60_000

/** A `Retry-After` header (seconds, or an HTTP date) in milliseconds, capped; null when absent or unreadable. */
export function retryAfterMs(value: string | null | undefined, now = Date.now()): number | null {
  if (value === null || value === undefined || value.trim() === '') return null
  const seconds = Number(value)
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - now
  return Number.isFinite(ms) ? Math.min(RETRY_AFTER_MAX_MS, Math.max(0, Math.round(ms))) : null
}

/**
 * One retry of a model call: which, why (the HTTP status, null when there was none; `reason` in words) and how long
 * it waits.
 */
export interface ModelRetry {
  attempt: number
  status: number | null
  waitMs: number
  reason: string
}

/**
 * The stream ended before the model said it was done. Before any content (after OpenAI's role chunk or
 * Anthropic's `message_start` alone) the call is tried again; after it, the run fails.
 */
export class StreamCut extends EngineError {
  override name = 'StreamCut'

  constructor() {
    super('upstream_error: the stream ended early')
  }
}

export interface Usage {
  promptTokens: number
  completionTokens: number
}

/** One model call as the tool loop asks for it. */
export interface CallRequest {
  messages: WireMessage[]
  model: string
  tools: ToolDefinition[]
  settings: RunSettings
  /** aborted on cancel and by the idle timeout */
  signal: AbortSignal
  onDelta(text: string): Promise<void> | void
  /** called with each piece of the stream as it arrives, content or not (the idle timeout starts over) */
  onProgress(): void
  /**
   * called when the answer says something: a text token or a tool call. Until then a cut, an error event or a
   * retryable status is tried again; from then on a failure is final
   */
  onContent(): void
}

export interface CallAnswer {
  text: string
  usage: Usage
  toolCalls: ToolCall[]
  /** why the model stopped, in the provider's word (`stop`, `tool_calls`, `end_turn`, …), when it said */
  finishReason?: string | undefined
}

/** What a protocol (the OpenAI or Anthropic SDK) does; everything else is shared. */
export interface ModelProtocol {
  /** one streamed call; throws the SDK's error as it is */
  call(req: CallRequest): Promise<CallAnswer>
  /** the model ids its models endpoint lists (the readiness probe) */
  listModels(signal: AbortSignal): Promise<string[]>
  /** loads what the protocol needs (its SDK) before any deadline of a call or a probe starts counting */
  load(): Promise<unknown>
}

export interface ModelEngineOptions {
  id: string
  name: string
  models: string[]
  timeoutMs: number
  probeTtlMs: number
  /** model calls answered with tool results per run, at most */
  maxToolRounds: number
  /** MODEL_RETRIES: tries after the first, before the first token, for 429, 5xx and connection failures */
  retries?: number | undefined
  /** MODEL_RETRY_BASE_MS: the first retry waits between half of it and it, doubling each time */
  retryBaseMs?: number | undefined
  /** false: the protocol is not configured (no base URL) */
  configured: boolean
  /** who the model's errors name: `provider "Acme" at api.acme.test` */
  label: string
  /** the instance's breakers, and this connection's key among them; none: every call is tried */
  breaker?: { breakers: ModelBreakers; key: string } | undefined
}

/** What a model engine of either protocol is built from (the deployment's settings, or an org provider's). */
export interface ModelClientOptions {
  baseUrl: string | undefined
  apiKey: string | undefined
  models: string[]
  timeoutMs: number
  probeTtlMs: number
  /** model calls answered with tool results per run, at most */
  maxToolRounds: number
  /** how requests are made (an org provider's guarded fetch); the global fetch by default */
  fetch?: ((url: string, init: RequestInit) => Promise<Response>) | undefined
  /** MODEL_RETRIES: tries after the first, before the first token, for 429, 5xx and connection failures */
  retries?: number | undefined
  /** MODEL_RETRY_BASE_MS: the first retry waits between half of it and it, doubling each time */
  retryBaseMs?: number | undefined
  /** who the model's errors name (an org provider's name); by default the protocol and the base URL's host */
  label?: string | undefined
  /** the instance's breakers (MODEL_BREAKER_OPEN_MS), shared by every engine of the instance */
  breakers?: ModelBreakers | undefined
}

/** A model engine of one protocol: not configured (never ready) without a base URL. */
export function protocolEngine(
  id: string,
  name: string,
  opts: ModelClientOptions,
  protocol: (base: string) => ModelProtocol
): Engine {
  const base = opts.baseUrl?.replace(/\/+$/, '')
  const unconfigured: ModelProtocol = {
    call: () => Promise.reject(new EngineError(`${id} engine is not configured`)),
    listModels: () => Promise.resolve([]),
    load: () => Promise.resolve()
  }
  let host = base ?? ''
  try {
    if (base) host = new URL(base).host
  } catch {
    // the base URL as written
  }
  const label = opts.label ?? `the ${name} API at ${host}`
  const breaker =
    base && opts.breakers ? { breakers: opts.breakers, key: ModelBreakers.key(id, base, opts.apiKey) } : undefined
  return modelEngine(base ? protocol(base) : unconfigured, {
    ...opts,
    id,
    name,
    configured: base !== undefined,
    label,
    breaker
  })
}

/**
 * The HTTP status and headers of an SDK error (both SDKs' `APIError` carry them); status null when it never got an
 * answer.
 */
function upstreamAnswer(err: unknown): { http: boolean; status: number | null; headers: Headers | undefined } {
  const e = err as { status?: unknown; headers?: unknown } | null
  const status = typeof e?.status === 'number' ? e.status : null
  const headers = e?.headers instanceof Headers ? e.headers : undefined
  return { http: status !== null, status, headers }
}

/** A failure in words: "Connection error." or "fetch failed" say nothing without their deepest cause. */
function failureText(err: unknown): string {
  const e = err as Error
  let cause: unknown = e.cause
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause
  return cause instanceof Error && cause.message !== '' ? `${e.message}: ${cause.message}` : e.message
}

/** Why a model call is tried again, in a few words (the `model.retry` event's `reason`). */
function retryReason(err: unknown): string {
  if (err instanceof StreamCut) return 'the stream ended before any content'
  return unreachableCause(err)
}

/** Why a model could not be reached, in a few words: the HTTP answer, or what happened to the connection. */
function unreachableCause(err: unknown): string {
  if (err instanceof EngineError) return err.message.replace(/^upstream_error: /, '')
  const { status } = upstreamAnswer(err)
  if (status !== null) return engineErrorOf(err).message.replace(/^upstream_error: /, '')
  let cause: unknown = err
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause
  const code = (cause as NodeJS.ErrnoException | undefined)?.code
  if (code === 'ECONNREFUSED') return 'nothing accepts connections there (connection refused)'
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'its host name does not resolve'
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'it closed the connection before answering'
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') return 'the connection timed out'
  // the SDK's "Connection error." says nothing its cause does not
  return readable(cause instanceof Error && cause.message !== '' ? cause.message : failureText(err))
}

/**
 * The run's `error` for an SDK failure: `upstream_error: HTTP <status>: <the provider's message>`, or why it could not
 * connect.
 */
function engineErrorOf(err: unknown): EngineError {
  if (err instanceof EngineError) return err
  const { status } = upstreamAnswer(err)
  if (status !== null) {
    const detail = readable(((err as Error).message ?? '').replace(/^\d{3}\s*/, ''))
    return new EngineError(
      `upstream_error: HTTP ${status}${detail && detail !== 'status code (no body)' ? `: ${detail}` : ''}`
    )
  }
  return new EngineError(`upstream_error: ${readable(failureText(err))}`)
}

/**
 * A provider's error as one sentence: the message (and type) of a JSON error body (`{"error": {"type", "message"}}`,
 * as both APIs answer), else the text itself; at most 300 characters on one line.
 */
export function readable(text: string): string {
  let out = text
  const brace = text.indexOf('{')
  if (brace >= 0) {
    try {
      const body = JSON.parse(text.slice(brace)) as { error?: unknown; message?: unknown } | null
      const error = (typeof body?.error === 'object' ? body.error : body) as {
        type?: unknown
        message?: unknown
      } | null
      if (typeof error?.message === 'string' && error.message !== '') {
        const type = typeof error.type === 'string' && error.type !== '' ? ` (${error.type})` : ''
        out = `${text.slice(0, brace).replace(/[:\s]+$/, '')}${brace > 0 ? ': ' : ''}${error.message}${type}`
      }
    } catch {
      // not JSON: the text as it is
    }
  }
  out = out.replace(/\s+/g, ' ').trim()
  return out.length > 300 ? `${out.slice(0, 299)}…` : out
}

/**
 * A model engine: readiness from a cached models probe, the run's tool loop and chat, each
 * model call under an idle timeout and retried before its first token.
 */
export function modelEngine(protocol: ModelProtocol, opts: ModelEngineOptions): Engine {
  const retries = opts.retries ?? 3
  const retryBaseMs = opts.retryBaseMs ?? 500
  /** how long a client is told to wait after a call gave up */
  const breakerMs = opts.breaker?.breakers.openMs || 5000
  let probe: { at: number; ok: boolean; ids: string[] } | null = null
  let probing: Promise<boolean> | null = null

  async function check(): Promise<boolean> {
    if (!opts.configured) return false
    if (probe && Date.now() - probe.at < opts.probeTtlMs) return probe.ok
    probing ??= (async () => {
      let ok = false
      let ids: string[] = []
      try {
        await protocol.load()
        ids = await protocol.listModels(AbortSignal.timeout(Math.min(2000, opts.timeoutMs)))
        ok = true
      } catch {
        ok = false
      }
      // the last models it listed are kept while it is away: they are still what it is configured with
      probe = { at: Date.now(), ok, ids: ok ? ids : (probe?.ids ?? []) }
      probing = null
      return ok
    })()
    return probing
  }

  const noModel = () =>
    new ModelUnavailable(
      opts.configured
        ? `model_unavailable: ${opts.label} could not be reached to learn its models, and none is configured`
        : `model_unavailable: no ${opts.name} model is configured on this server or by the organization's providers`,
      breakerMs
    )
  const modelIds = (): string[] => (opts.models.length > 0 ? opts.models : (probe?.ids ?? []))

  /** One model call as telemetry sees it: a `chat <model>` span, its retries as events, and the model metrics. */
  function call(
    req: Omit<CallRequest, 'signal' | 'onProgress' | 'onContent'>,
    signal: AbortSignal,
    onRetry?: (retry: ModelRetry) => Promise<void> | void
  ): Promise<CallAnswer> {
    const info = { provider: opts.id, model: req.model, settings: req.settings, messages: req.messages }
    return observeModelCall(info, (retried) =>
      attempts(req, signal, async (retry) => {
        retried(retry)
        await onRetry?.(retry)
      })
    )
  }

  /**
   * One model call, streamed: aborted when nothing arrives for `timeoutMs`; a 429, 5xx or
   * connection failure before anything of the answer arrived is tried again (`Retry-After`
   * honoured, else exponential backoff with jitter), reported through onRetry.
   */
  async function attempts(
    req: Omit<CallRequest, 'signal' | 'onProgress' | 'onContent'>,
    signal: AbortSignal,
    onRetry?: (retry: ModelRetry) => Promise<void> | void
  ): Promise<CallAnswer> {
    if (!opts.configured)
      throw new ModelUnavailable(`model_unavailable: the ${opts.name} engine is not configured on this server`, 60_000)
    const breaker = opts.breaker
    const open = breaker?.breakers.admit(breaker.key)
    if (open)
      throw new ModelUnavailable(
        `model_unavailable: ${opts.label} could not be reached: ${open.cause} (no request is sent to it for ${Math.ceil(open.retryAfterMs / 1000)} s)`,
        open.retryAfterMs
      )
    try {
      const answer = await tries(req, signal, onRetry)
      breaker?.breakers.answered(breaker.key)
      return answer
    } catch (err) {
      if (err instanceof ModelUnavailable && typeof err.cause === 'string')
        breaker?.breakers.unreachable(breaker.key, err.cause)
      else if (err instanceof EngineError) breaker?.breakers.answered(breaker.key)
      else breaker?.breakers.release(breaker.key)
      throw err
    }
  }

  /** The tries of one model call (attempts), without the breaker. */
  async function tries(
    req: Omit<CallRequest, 'signal' | 'onProgress' | 'onContent'>,
    signal: AbortSignal,
    onRetry?: (retry: ModelRetry) => Promise<void> | void
  ): Promise<CallAnswer> {
    await protocol.load()
    for (let attempt = 1; ; attempt++) {
      const idle = new AbortController()
      let timer = setTimeout(() => idle.abort(), opts.timeoutMs)
      // the one place that decides whether the answer has said something yet (every protocol reports it)
      let started = false
      const onContent = () => {
        started = true
      }
      const onProgress = () => {
        clearTimeout(timer)
        timer = setTimeout(() => idle.abort(), opts.timeoutMs)
      }
      let failure: unknown
      try {
        const combined = AbortSignal.any([signal, idle.signal])
        const answer = await protocol.call({ ...req, signal: combined, onProgress, onContent })
        // an SDK ends a stream quietly when its signal aborts
        if (signal.aborted) throw signal.reason
        if (idle.signal.aborted) throw new EngineError(`upstream_timeout: no answer within ${opts.timeoutMs} ms`)
        return answer
      } catch (err) {
        failure = err
      } finally {
        clearTimeout(timer)
      }
      if (signal.aborted) throw signal.reason
      if (idle.signal.aborted) throw new EngineError(`upstream_timeout: no answer within ${opts.timeoutMs} ms`)
      const { http, status, headers } = upstreamAnswer(failure)
      // an error event in the stream (Anthropic's overloaded_error) is an SDK error without a status: retried too
      const retryable =
        failure instanceof StreamCut || (!(failure instanceof EngineError) && (http ? RETRYABLE.has(status!) : true))
      if (started || !retryable) throw engineErrorOf(failure)
      if (attempt > retries) {
        const cause = unreachableCause(failure)
        const tried = attempt === 1 ? 'once' : `${attempt} times`
        throw new ModelUnavailable(
          `model_unavailable: ${opts.label} could not be reached (tried ${tried}): ${cause}`,
          breakerMs,
          {
            cause
          }
        )
      }
      const waitMs = retryAfterMs(headers?.get('retry-after')) ?? backoffDelay(attempt, retryBaseMs, RETRY_AFTER_MAX_MS)
      await onRetry?.({ attempt, status, waitMs, reason: retryReason(failure) })
      await abortable(waitMs, signal)
    }
  }

  return {
    id: opts.id,
    name: opts.name,
    configured: opts.configured,
    ready: check,
    async models() {
      if (!(await check())) return []
      return modelIds().map((id) => ({ id, engine: opts.id, name: id }))
    },
    async configuredModels() {
      if (!opts.configured) return []
      // without MODELS, its ids are what its models endpoint listed (asked once, if never yet)
      if (opts.models.length === 0 && (probe?.ids.length ?? 0) === 0) await check()
      return modelIds().map((id) => ({ id, engine: opts.id, name: id }))
    },
    async run(ctx: EngineContext) {
      const model = ctx.model ?? modelIds()[0]
      if (!model) throw noModel()
      const tools = ctx.tools && opts.maxToolRounds > 0 ? ctx.tools.definitions() : []
      let wire: WireMessage[]
      let round = 0
      // this execution's calls (a run that goes on after it waited counts what it spent before itself)
      const usage = { promptTokens: 0, completionTokens: 0 }
      if (ctx.resume) {
        // on from the stored conversation; the round that asked is not asked again
        wire = ctx.resume.messages as WireMessage[]
        round = ctx.resume.round
        await toolRound(ctx, wire, round, ctx.resume.calls)
        round++
      } else {
        // the prompt's significant words, at most MEMORY_RECALL_LIMIT facts
        const items = await ctx.recall(ctx.prompt)
        // system messages, then the thread's earlier turns, then this prompt
        const messages: WireMessage[] = []
        if (ctx.instructions) messages.push({ role: 'system', content: ctx.instructions })
        if (items.length > 0) {
          messages.push({ role: 'system', content: memoryMessage(items) })
        }
        const prompt = ctx.attachments ? `${ctx.prompt}\n\n${ctx.attachments.message}` : ctx.prompt
        messages.push(...replayable(ctx.history), { role: 'user', content: prompt })
        wire = messages
      }
      for (; ; round++) {
        const answer = await call(
          {
            messages: wire,
            model,
            tools,
            settings: ctx.settings,
            onDelta: (delta) => ctx.emit('message.delta', { text: delta })
          },
          ctx.signal,
          (retry) => ctx.emit('model.retry', { ...retry })
        )
        ctx.reportUsage(answer.usage)
        usage.promptTokens += answer.usage.promptTokens
        usage.completionTokens += answer.usage.completionTokens
        if (answer.toolCalls.length === 0 || !ctx.tools || tools.length === 0) {
          await ctx.emit('message.completed', { text: answer.text })
          return {
            text: answer.text,
            facts: [],
            usage,
            transcript: ownMessages([...wire, { role: 'assistant', content: answer.text }])
          }
        }
        if (round >= opts.maxToolRounds) {
          throw new EngineError(
            `tool_rounds_exceeded: the model still asked for tools after ${opts.maxToolRounds} rounds (OPENAI_MAX_TOOL_ROUNDS)`
          )
        }
        const calls = answer.toolCalls.map((c, i) => ({ ...c, id: c.id || `call_${round}_${i}` }))
        wire.push({ role: 'assistant', content: answer.text === '' ? null : answer.text, tool_calls: calls })
        await toolRound(
          ctx,
          wire,
          round,
          calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }))
        )
      }
    },
    async chat(messages, model, signal, out) {
      const chosen = model ?? modelIds()[0]
      if (!chosen) throw noModel()
      const { usage } = await call(
        {
          messages: replayable(messages),
          model: chosen,
          tools: [],
          settings: {},
          onDelta: (delta) => out.onToken(delta)
        },
        signal
      )
      return usage
    },
    async complete(messages, model, settings, signal) {
      const chosen = model ?? modelIds()[0]
      if (!chosen) throw noModel()
      const { text, usage } = await call(
        { messages: replayable(messages), model: chosen, tools: [], settings, onDelta: () => {} },
        signal
      )
      return { text, usage }
    }
  }
}

/**
 * Earlier turns as every provider takes them: an empty answer (no text and no tool call, as a model may give after a
 * tool result) is left out (see emptyAnswerText). An assistant turn that carries tool calls is kept whatever its text.
 */
export function replayable<M extends WireMessage>(messages: M[]): M[] {
  const empty = (m: WireMessage) =>
    m.role === 'assistant' && !('tool_calls' in m && m.tool_calls.length > 0) && emptyAnswerText(m.content)
  return messages.some(empty) ? messages.filter((m) => !empty(m)) : messages
}

/** Recalled facts as the one system message a model gets them in. */
export function memoryMessage(items: ReadonlyArray<{ content: string }>): string {
  return `Relevant memory (facts remembered from earlier conversations; they may be out of date):\n${items.map((i) => `- ${i.content}`).join('\n')}`
}

/**
 * One round of tool calls, in the model's order, their results appended to `wire`. A call
 * that needs a person's decision leaves the run waiting (RunSuspended):
 * the calls after it that need a decision are asked too, so people can decide them
 * together; those that need none run after it, when the run goes on. A call with a
 * result already is never executed again.
 */
async function toolRound(
  ctx: EngineContext,
  wire: WireMessage[],
  round: number,
  calls: SuspendedRun['calls']
): Promise<void> {
  const tools = ctx.tools!
  let waiting = false
  // where the run goes on from if it is handed back while a call runs: this round, not the model call that asked for it
  ctx.checkpoint?.({ messages: wire, round, calls })
  for (const c of calls) {
    if (c.content !== undefined) continue
    if (ctx.signal.aborted) throw ctx.signal.reason
    // behind a call that waits, a decided one waits too: calls run in order
    if (waiting && c.approvalId !== undefined) continue
    const answer = await tools.execute({
      callId: c.id,
      name: c.name,
      arguments: c.arguments,
      signal: ctx.signal,
      defer: waiting,
      approvalId: c.approvalId,
      round
    })
    if (ctx.signal.aborted) throw ctx.signal.reason
    if ('pending' in answer) {
      c.approvalId = answer.pending
      waiting = true
    } else if ('content' in answer) {
      c.content = answer.content
      ctx.checkpoint?.({ messages: wire, round, calls })
    }
  }
  if (waiting) throw new RunSuspended({ messages: wire, round, calls })
  for (const c of calls) wire.push({ role: 'tool', tool_call_id: c.id, content: c.content! })
  // the round is whole: going on from here asks the model again, with every result (the transcript keeps it)
  await ctx.checkpoint?.({ messages: wire, round, calls: [] })
}
