import type OpenAI from 'openai'
import type { ChatCompletionCreateParamsStreaming, ChatCompletionMessageParam } from 'openai/resources/chat/completions'
import type { RunSettings } from '../tables.js'
import type { Engine, ToolCall } from './types.js'
import { protocolEngine, StreamCut, type ModelClientOptions, type ModelProtocol } from './model-call.js'
import { traceHeaders } from '../../telemetry/tracing.js'

export { retryAfterMs, type ModelRetry } from './model-call.js'

export type OpenAiOptions = ModelClientOptions

/** A run's settings as chat-completions parameters. */
function requestSettings(s: RunSettings): Partial<ChatCompletionCreateParamsStreaming> {
  const out: Partial<ChatCompletionCreateParamsStreaming> = {}
  if (s.temperature !== undefined) out.temperature = s.temperature
  // max_tokens: what every OpenAI-compatible server reads (OpenAI's newer
  // max_completion_tokens is not understood by many of them)
  if (s.maxOutputTokens !== undefined) out.max_tokens = s.maxOutputTokens
  const f = s.responseFormat
  if (f?.type === 'json_schema')
    out.response_format = {
      type: 'json_schema',
      json_schema: {
        name: f.name,
        schema: f.schema as Record<string, unknown>,
        // strict (the answer always matches) where OpenAI's strict mode can take the schema
        ...(strictAllowed(f.schema) ? { strict: true } : {})
      }
    }
  else if (f) out.response_format = { type: f.type }
  return out
}

/** OpenAI refuses json_object unless a message asks for JSON: this system line does. */
export const JSON_OBJECT_LINE = 'Answer with one JSON object and nothing else.'

/**
 * Whether OpenAI's strict structured outputs can take a schema as it is: every object lists all its properties in
 * `required` and allows no others (`additionalProperties: false`), at every depth.
 */
export function strictAllowed(schema: unknown): boolean {
  if (Array.isArray(schema)) return schema.every(strictAllowed)
  if (schema === null || typeof schema !== 'object') return true
  const node = schema as Record<string, unknown>
  const properties = node.properties
  if (node.type === 'object' || (properties !== null && typeof properties === 'object')) {
    if (node.additionalProperties !== false) return false
    const keys = properties && typeof properties === 'object' ? Object.keys(properties) : []
    const required = Array.isArray(node.required) ? node.required : []
    if (!keys.every((k) => required.includes(k))) return false
  }
  return Object.entries(node).every(
    ([key, value]) => key === 'required' || key === 'enum' || key === 'const' || strictAllowed(value)
  )
}

/**
 * The OpenAI chat-completions protocol through the official `openai` SDK: its client makes
 * the request, parses the event stream and raises typed errors; the SDK's own retries are
 * off (model-call.ts retries, reporting each as a `model.retry` event). Tool-call deltas are
 * put together by index.
 */
function openAiProtocol(opts: OpenAiOptions, base: string): ModelProtocol {
  // the SDK is loaded at the first call: a process that never calls such a model never loads it
  let loading: Promise<OpenAI> | undefined
  const sdk = () => (loading ??= import('openai').then(({ default: SDK }) => newClient(SDK)))
  const newClient = (SDK: typeof OpenAI) =>
    new SDK({
      baseURL: base,
      // a local server may need no key: then no Authorization header is sent at all (the
      // SDK wants some key; the header made of it is removed)
      apiKey: opts.apiKey || 'none',
      ...(opts.apiKey ? {} : { defaultHeaders: { Authorization: null } }),
      organization: null,
      project: null,
      maxRetries: 0,
      timeout: opts.timeoutMs,
      logLevel: 'off',
      ...(opts.fetch ? { fetch: opts.fetch as typeof fetch } : {})
    })
  return {
    load: sdk,
    async listModels(signal) {
      const client = await sdk()
      const page = await client.models.list({ signal })
      return page.data.map((m) => m.id).filter((id): id is string => typeof id === 'string')
    },
    async call(req) {
      const client = await sdk()
      const stream = await client.chat.completions.create(
        {
          model: req.model,
          messages: (req.settings.responseFormat?.type === 'json_object'
            ? [{ role: 'system', content: JSON_OBJECT_LINE }, ...req.messages]
            : req.messages) as ChatCompletionMessageParam[],
          ...(req.tools.length > 0 ? { tools: req.tools as ChatCompletionCreateParamsStreaming['tools'] } : {}),
          ...requestSettings(req.settings),
          stream: true,
          stream_options: { include_usage: true }
        },
        // the provider may continue the run's trace (docs/observability.md)
        { signal: req.signal, headers: traceHeaders() }
      )
      let text = ''
      let usage = { promptTokens: 0, completionTokens: 0 }
      let finished: string | null = null
      const calls: ToolCall[] = []
      for await (const chunk of stream) {
        req.onProgress()
        const choice = chunk.choices?.[0]
        const delta = choice?.delta?.content
        if (delta || (choice?.delta?.tool_calls?.length ?? 0) > 0) req.onContent()
        if (delta) {
          text += delta
          await req.onDelta(delta)
        }
        for (const piece of choice?.delta?.tool_calls ?? []) {
          const index =
            typeof piece.index === 'number' && piece.index >= 0 && piece.index < 128 ? piece.index : calls.length
          const call = (calls[index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } })
          if (typeof piece.id === 'string' && piece.id !== '') call.id = piece.id
          if (typeof piece.function?.name === 'string') call.function.name += piece.function.name
          if (typeof piece.function?.arguments === 'string') call.function.arguments += piece.function.arguments
        }
        if (choice?.finish_reason) finished = choice.finish_reason
        if (chunk.usage)
          usage = { promptTokens: chunk.usage.prompt_tokens ?? 0, completionTokens: chunk.usage.completion_tokens ?? 0 }
      }
      if (finished === null && !req.signal.aborted) throw new StreamCut()
      return { text, usage, toolCalls: calls.filter((c) => c !== undefined), finishReason: finished ?? undefined }
    }
  }
}

/**
 * Any OpenAI-compatible chat-completions endpoint, streamed. Ready only when configured
 * and its `/models` answered recently (a short probe, cached).
 */
export function openAiEngine(opts: OpenAiOptions): Engine {
  return protocolEngine('openai', 'OpenAI-compatible', opts, (base) => openAiProtocol(opts, base))
}
