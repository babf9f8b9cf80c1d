import { createParser, type EventSourceMessage } from 'eventsource-parser'
import type { RunSettings } from '../tables.js'
import { EngineError, type ChatMessage, type Engine, type ToolCall, type ToolDefinition, type WireMessage } from './types.js'

export interface OpenAiOptions {
  baseUrl: string | undefined
  apiKey: string | undefined
  models: string[]
  timeoutMs: number
  probeTtlMs: number
  /** model calls answered with tool results per run, at most */
  maxToolRounds: number
  /** how requests are made (an org provider's guarded fetch); the global fetch by default */
  fetch?: ((url: string, init: RequestInit) => Promise<Response>) | undefined
}

/** A run's settings as chat-completions parameters (contract 13.3). */
function requestSettings(s: RunSettings): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  if (s.temperature !== undefined) out.temperature = s.temperature
  if (s.maxOutputTokens !== undefined) out.max_tokens = s.maxOutputTokens
  const f = s.responseFormat
  if (f?.type === 'json_schema') out.response_format = { type: 'json_schema', json_schema: { name: f.name, schema: f.schema } }
  else if (f) out.response_format = { type: f.type }
  return out
}

/** A fetch failure in words: undici's "fetch failed" says nothing without its cause. */
function failureText(err: unknown): string {
  const e = err as Error
  let cause: unknown = e.cause
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause
  return cause instanceof Error && cause.message !== '' ? `${e.message}: ${cause.message}` : e.message
}

/**
 * Any OpenAI-compatible chat-completions endpoint, streamed. Ready only when configured
 * and its `/models` answered recently (a short probe, cached).
 */
export function openAiEngine(opts: OpenAiOptions): Engine {
  const base = opts.baseUrl?.replace(/\/+$/, '')
  const fetch = opts.fetch ?? globalThis.fetch
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
  async function stream(messages: WireMessage[], model: string, signal: AbortSignal, onDelta: (text: string) => Promise<void> | void, tools?: ToolDefinition[], settings: RunSettings = {}) {
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
        body: JSON.stringify({ model, messages, ...(tools && tools.length > 0 ? { tools } : {}), ...requestSettings(settings), stream: true, stream_options: { include_usage: true } }),
        signal: combined
      })
      if (!res.ok || !res.body) {
        const detail = (await res.text().catch(() => '')).slice(0, 200).replace(/\s+/g, ' ')
        throw new EngineError(`upstream_error: HTTP ${res.status}${detail ? `: ${detail}` : ''}`)
      }
      // frames are parsed by eventsource-parser; each chunk's events are handled in order
      // before the next chunk is read, so deltas reach the run's events as they arrive
      const events: EventSourceMessage[] = []
      const parser = createParser({ onEvent: (event) => void events.push(event) })
      const decoder = new TextDecoder()
      let done = false
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        rearm()
        parser.feed(decoder.decode(chunk, { stream: true }))
        for (const event of events.splice(0)) {
          if (event.data === '[DONE]') {
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
            parsed = JSON.parse(event.data)
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
      throw new EngineError(`upstream_error: ${failureText(err)}`)
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
      // contract 13.2: system messages, then the thread's earlier turns, then this prompt
      const messages: ChatMessage[] = []
      if (ctx.instructions) messages.push({ role: 'system', content: ctx.instructions })
      if (items.length > 0) {
        messages.push({ role: 'system', content: `Relevant memory:\n${items.map((i) => `- ${i.content}`).join('\n')}` })
      }
      messages.push(...ctx.history, { role: 'user', content: ctx.prompt })
      const model = ctx.model ?? modelIds()[0]
      if (!model) throw new EngineError('no model configured for the openai engine')
      const tools = ctx.tools && opts.maxToolRounds > 0 ? ctx.tools.definitions() : []
      const wire: WireMessage[] = messages
      const usage = { promptTokens: 0, completionTokens: 0 }
      for (let round = 0; ; round++) {
        const answer = await stream(wire, model, ctx.signal, (delta) => ctx.emit('message.delta', { text: delta }), tools, ctx.settings)
        ctx.reportUsage(answer.usage)
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
