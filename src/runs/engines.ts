import type { EngineInfo, ModelInfo } from '../../plugins/features.js'
import type { RecalledItem } from './memory-port.js'

/** What an engine gets while it runs one run. */
export interface EngineContext {
  runId: string
  prompt: string
  model: string | null
  /** aborted on cancel, on shutdown and when the worker loses the run */
  signal: AbortSignal
  /** stores and publishes an event of this run (awaited: stored before it is sent) */
  emit(type: string, data: Record<string, unknown>): Promise<void>
  /** recalls from the run's memory pools; emits `memory.recalled` */
  recall(query: string): Promise<RecalledItem[]>
  /** the agent runtime's tools for this run; absent when no tool gateway is available */
  tools?: RunTools | undefined
}

/** An OpenAI `tools` entry. */
export interface ToolDefinition {
  type: 'function'
  function: { name: string; description?: string; parameters: unknown }
}

/**
 * The tool gateway as an engine sees it (kept free of Fastify): the definitions to offer
 * and one call at a time, recorded as `tool.call` / `tool.result` run events.
 */
export interface RunTools {
  definitions(): ToolDefinition[]
  execute(call: { callId: string; name: string; arguments: string; signal: AbortSignal }): Promise<{ content: string }>
}

export interface ToolCall {
  id: string
  type: 'function'
  function: { name: string; arguments: string }
}

export interface EngineResult {
  /** the final answer text */
  text: string
  /** facts to capture into memory when the run succeeds */
  facts: string[]
  usage?: { promptTokens: number; completionTokens: number }
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
}

/** What the tool loop sends: chat messages plus assistant tool calls and tool results. */
type WireMessage =
  | ChatMessage
  | { role: 'assistant'; content: string | null; tool_calls: ToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string }

export interface ChatStream {
  onToken(text: string): void
}

export interface Engine {
  readonly id: string
  readonly name: string
  /** configured and reachable right now (may be cached) */
  ready(): Promise<boolean>
  models(): Promise<ModelInfo[]>
  run(ctx: EngineContext): Promise<EngineResult>
  chat(messages: ChatMessage[], model: string | null, signal: AbortSignal, out: ChatStream): Promise<{ promptTokens: number; completionTokens: number }>
}

/** An engine failure with the text that ends up in the run's `error`. */
export class EngineError extends Error {
  override name = 'EngineError'
}

const abortable = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    if (ms <= 0) return resolve()
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener('abort', onAbort, { once: true })
  })

/** Sentences of the prompt that mention "remember" (any case): the echo engine's captures. */
export function rememberSentences(prompt: string): string[] {
  return prompt
    .split(/(?<=[.!?])\s+|\n+/)
    .map((s) => s.trim())
    .filter((s) => s !== '' && /\bremember\b/i.test(s))
}

const words = (text: string) => text.split(/\s+/).filter(Boolean)

/** Contract 5: offline, deterministic, always ready; streams the prompt back word by word. */
export function echoEngine(opts: { wordDelayMs: number }): Engine {
  const model: ModelInfo = { id: 'echo', engine: 'echo', name: 'Echo (offline)' }
  return {
    id: 'echo',
    name: 'Echo (offline, for development and tests)',
    async ready() {
      return true
    },
    async models() {
      return [model]
    },
    async run(ctx) {
      await ctx.recall(ctx.prompt)
      const parts = words(ctx.prompt)
      for (let i = 0; i < parts.length; i++) {
        if (i > 0) await abortable(opts.wordDelayMs, ctx.signal)
        else if (ctx.signal.aborted) throw ctx.signal.reason
        await ctx.emit('message.delta', { text: i === 0 ? parts[i] : ` ${parts[i]}` })
      }
      const text = parts.join(' ')
      await ctx.emit('message.completed', { text })
      return { text, facts: rememberSentences(ctx.prompt), usage: { promptTokens: parts.length, completionTokens: parts.length } }
    },
    async chat(messages, _model, signal, out) {
      const last = [...messages].reverse().find((m) => m.role === 'user')
      const parts = words(last?.content ?? '')
      for (let i = 0; i < parts.length; i++) {
        if (i > 0) await abortable(opts.wordDelayMs, signal)
        out.onToken(i === 0 ? parts[i]! : ` ${parts[i]}`)
      }
      const promptTokens = messages.reduce((n, m) => n + words(m.content).length, 0)
      return { promptTokens, completionTokens: parts.length }
    }
  }
}

export interface OpenAiOptions {
  baseUrl: string | undefined
  apiKey: string | undefined
  models: string[]
  timeoutMs: number
  probeTtlMs: number
  /** model calls answered with tool results per run, at most */
  maxToolRounds: number
}

/**
 * Any OpenAI-compatible chat-completions endpoint, streamed. Ready only when configured
 * and its `/models` answered recently (a short probe, cached).
 */
export function openAiEngine(opts: OpenAiOptions): Engine {
  const base = opts.baseUrl?.replace(/\/+$/, '')
  let probe: { at: number; ok: boolean; ids: string[] } | null = null
  let probing: Promise<boolean> | null = null

  function headers(): Record<string, string> {
    const h: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' }
    if (opts.apiKey) h.authorization = `Bearer ${opts.apiKey}`
    return h
  }

  async function check(): Promise<boolean> {
    if (!base) return false
    if (probe && Date.now() - probe.at < opts.probeTtlMs) return probe.ok
    probing ??= (async () => {
      let ok = false
      let ids: string[] = []
      try {
        const res = await fetch(`${base}/models`, { headers: headers(), signal: AbortSignal.timeout(Math.min(2000, opts.timeoutMs)) })
        ok = res.ok
        if (ok) {
          const body = (await res.json().catch(() => ({}))) as { data?: Array<{ id?: unknown }> }
          ids = (body.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string')
        } else await res.body?.cancel()
      } catch {
        ok = false
      }
      probe = { at: Date.now(), ok, ids }
      probing = null
      return ok
    })()
    return probing
  }

  function modelIds(): string[] {
    return opts.models.length > 0 ? opts.models : (probe?.ids ?? [])
  }

  /**
   * POSTs a streaming chat completion and calls onDelta for each content chunk; tool call
   * deltas are put together by index (id, name, arguments arrive in pieces).
   */
  async function stream(messages: WireMessage[], model: string, signal: AbortSignal, onDelta: (text: string) => Promise<void> | void, tools?: ToolDefinition[]) {
    if (!base) throw new EngineError('openai engine is not configured')
    const timeout = new AbortController()
    let timer = setTimeout(() => timeout.abort(), opts.timeoutMs)
    const rearm = () => {
      clearTimeout(timer)
      timer = setTimeout(() => timeout.abort(), opts.timeoutMs)
    }
    const combined = AbortSignal.any([signal, timeout.signal])
    let text = ''
    let usage = { promptTokens: 0, completionTokens: 0 }
    const calls: ToolCall[] = []
    try {
      const res = await fetch(`${base}/chat/completions`, {
        method: 'POST',
        headers: { ...headers(), accept: 'text/event-stream' },
        body: JSON.stringify({ model, messages, ...(tools && tools.length > 0 ? { tools } : {}), stream: true, stream_options: { include_usage: true } }),
        signal: combined
      })
      if (!res.ok || !res.body) {
        const detail = (await res.text().catch(() => '')).slice(0, 200).replace(/\s+/g, ' ')
        throw new EngineError(`upstream_error: HTTP ${res.status}${detail ? `: ${detail}` : ''}`)
      }
      const decoder = new TextDecoder()
      let buffer = ''
      let done = false
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        rearm()
        buffer += decoder.decode(chunk, { stream: true })
        let nl: number
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, nl).replace(/\r$/, '')
          buffer = buffer.slice(nl + 1)
          if (!line.startsWith('data:')) continue
          const payload = line.slice(5).trim()
          if (payload === '[DONE]') {
            done = true
            break
          }
          let parsed: {
            choices?: Array<{
              delta?: {
                content?: string | null
                tool_calls?: Array<{ index?: number; id?: string; function?: { name?: string; arguments?: string } }>
              }
            }>
            usage?: { prompt_tokens?: number; completion_tokens?: number }
            error?: { message?: string }
          }
          try {
            parsed = JSON.parse(payload)
          } catch {
            throw new EngineError('upstream_error: unreadable stream chunk')
          }
          if (parsed.error) throw new EngineError(`upstream_error: ${parsed.error.message ?? 'error in stream'}`)
          const delta = parsed.choices?.[0]?.delta?.content
          if (delta) {
            text += delta
            await onDelta(delta)
          }
          for (const piece of parsed.choices?.[0]?.delta?.tool_calls ?? []) {
            const index = typeof piece.index === 'number' && piece.index >= 0 && piece.index < 128 ? piece.index : calls.length
            const call = (calls[index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } })
            if (typeof piece.id === 'string' && piece.id !== '') call.id = piece.id
            if (typeof piece.function?.name === 'string') call.function.name += piece.function.name
            if (typeof piece.function?.arguments === 'string') call.function.arguments += piece.function.arguments
          }
          if (parsed.usage) usage = { promptTokens: parsed.usage.prompt_tokens ?? 0, completionTokens: parsed.usage.completion_tokens ?? 0 }
        }
        if (done) break
      }
      if (!done) throw new EngineError('upstream_error: the stream ended early')
      return { text, usage, toolCalls: calls.filter((c) => c !== undefined) }
    } catch (err) {
      if (signal.aborted) throw signal.reason
      if (timeout.signal.aborted) throw new EngineError(`upstream_timeout: no answer within ${opts.timeoutMs} ms`)
      if (err instanceof EngineError) throw err
      throw new EngineError(`upstream_error: ${(err as Error).message}`)
    } finally {
      clearTimeout(timer)
    }
  }

  return {
    id: 'openai',
    name: 'OpenAI-compatible',
    ready: check,
    async models() {
      if (!(await check())) return []
      return modelIds().map((id) => ({ id, engine: 'openai', name: id }))
    },
    async run(ctx) {
      const items = await ctx.recall(ctx.prompt)
      const messages: ChatMessage[] = []
      if (items.length > 0) {
        messages.push({ role: 'system', content: `Relevant memory:\n${items.map((i) => `- ${i.content}`).join('\n')}` })
      }
      messages.push({ role: 'user', content: ctx.prompt })
      const model = ctx.model ?? modelIds()[0]
      if (!model) throw new EngineError('no model configured for the openai engine')
      const tools = ctx.tools && opts.maxToolRounds > 0 ? ctx.tools.definitions() : []
      const wire: WireMessage[] = messages
      const usage = { promptTokens: 0, completionTokens: 0 }
      for (let round = 0; ; round++) {
        const answer = await stream(wire, model, ctx.signal, (delta) => ctx.emit('message.delta', { text: delta }), tools)
        usage.promptTokens += answer.usage.promptTokens
        usage.completionTokens += answer.usage.completionTokens
        if (answer.toolCalls.length === 0 || !ctx.tools || tools.length === 0) {
          await ctx.emit('message.completed', { text: answer.text })
          return { text: answer.text, facts: [], usage }
        }
        if (round >= opts.maxToolRounds) {
          throw new EngineError(`tool_rounds_exceeded: the model still asked for tools after ${opts.maxToolRounds} rounds (OPENAI_MAX_TOOL_ROUNDS)`)
        }
        const calls = answer.toolCalls.map((c, i) => ({ ...c, id: c.id || `call_${round}_${i}` }))
        wire.push({ role: 'assistant', content: answer.text === '' ? null : answer.text, tool_calls: calls })
        // one at a time, in the model's order: each may wait for a person's approval
        for (const call of calls) {
          if (ctx.signal.aborted) throw ctx.signal.reason
          const result = await ctx.tools.execute({ callId: call.id, name: call.function.name, arguments: call.function.arguments, signal: ctx.signal })
          if (ctx.signal.aborted) throw ctx.signal.reason
          wire.push({ role: 'tool', tool_call_id: call.id, content: result.content })
        }
      }
    },
    async chat(messages, model, signal, out) {
      const chosen = model ?? modelIds()[0]
      if (!chosen) throw new EngineError('no model configured for the openai engine')
      const { usage } = await stream(messages, chosen, signal, (delta) => out.onToken(delta))
      return usage
    }
  }
}

/** The engines of one instance, with the `/api/config` catalog. */
export class EngineRegistry {
  readonly engines: Map<string, Engine>

  constructor(engines: Engine[]) {
    this.engines = new Map(engines.map((e) => [e.id, e]))
  }

  get(id: string): Engine | undefined {
    return this.engines.get(id)
  }

  async catalog(): Promise<{ engines: EngineInfo[]; models: ModelInfo[] }> {
    const out = { engines: [] as EngineInfo[], models: [] as ModelInfo[] }
    for (const engine of this.engines.values()) {
      if (!(await engine.ready())) continue
      out.engines.push({ id: engine.id, name: engine.name })
      out.models.push(...(await engine.models()))
    }
    return out
  }

  /** Picks the engine and model for a request: explicit engine, or the engine owning the model, else echo. */
  async resolve(engineId: string | undefined, model: string | undefined): Promise<{ engine: Engine; model: string | null } | { error: string }> {
    let engine: Engine | undefined
    if (engineId !== undefined) {
      engine = this.engines.get(engineId)
      if (!engine || !(await engine.ready())) return { error: `engine ${JSON.stringify(engineId)} is not available` }
    } else if (model !== undefined) {
      for (const candidate of this.engines.values()) {
        if ((await candidate.ready()) && (await candidate.models()).some((m) => m.id === model)) {
          engine = candidate
          break
        }
      }
      if (!engine) return { error: `model ${JSON.stringify(model)} is not available` }
    } else {
      engine = this.engines.get('echo')!
    }
    const models = await engine.models()
    if (model !== undefined && !models.some((m) => m.id === model)) {
      return { error: `model ${JSON.stringify(model)} is not available on engine ${engine.id}` }
    }
    return { engine, model: model ?? models[0]?.id ?? null }
  }
}
