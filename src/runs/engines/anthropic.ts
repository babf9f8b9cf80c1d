import type Anthropic from '@anthropic-ai/sdk'
import type {
  ContentBlockParam,
  MessageCreateParamsBase,
  MessageParam,
  Tool
} from '@anthropic-ai/sdk/resources/messages/messages'
import type { RunSettings } from '../tables.js'
import type { Engine, ToolCall, ToolDefinition, WireMessage } from './types.js'
import { protocolEngine, StreamCut, type ModelClientOptions, type ModelProtocol } from './model-call.js'
import { traceHeaders } from '../../telemetry/tracing.js'

/** `baseUrl` is the API's origin, e.g. https://api.anthropic.com (requests go to `{baseUrl}/v1/messages`). */
export type AnthropicOptions = ModelClientOptions

/** The API version every request names (the one the SDK's request shapes follow; the provider check sends it too). */
export const ANTHROPIC_VERSION = '2026-10-21'

/** The Messages API needs an output limit; a run that sets none gets this one. */
export const ANTHROPIC_DEFAULT_MAX_TOKENS = 4096

/**
 * The conversation as the Messages API takes it: system messages become `system`, an
 * assistant's tool calls `tool_use` blocks, and the tool results that follow them one user
 * message of `tool_result` blocks (the API wants every result right after its call); an
 * empty text is never sent, and turns of one role in a row are one message.
 */
export function toAnthropic(wire: WireMessage[]): { system: string; messages: MessageParam[] } {
  const system: string[] = []
  const messages: MessageParam[] = []
  for (const m of wire) {
    if (m.role === 'system') {
      system.push(m.content)
    } else if (m.role === 'tool') {
      const block: ContentBlockParam = { type: 'tool_result', tool_use_id: m.tool_call_id, content: m.content }
      const last = messages.at(-1)
      if (last?.role === 'user' && Array.isArray(last.content) && last.content.every((b) => b.type === 'tool_result'))
        last.content.push(block)
      else messages.push({ role: 'user', content: [block] })
    } else if (m.role === 'assistant' && 'tool_calls' in m) {
      const content: ContentBlockParam[] = []
      if (m.content) content.push({ type: 'text', text: m.content })
      for (const c of m.tool_calls)
        content.push({ type: 'tool_use', id: c.id, name: c.function.name, input: parseInput(c.function.arguments) })
      messages.push({ role: 'assistant', content })
    } else if (m.content.trim() !== '') {
      // the API refuses an empty text block; two turns of one role in a row (an empty answer left out between
      // them) become one message
      const last = messages.at(-1)
      if (last?.role === m.role) {
        const blocks: ContentBlockParam[] =
          typeof last.content === 'string' ? [{ type: 'text', text: last.content }] : [...last.content]
        blocks.push({ type: 'text', text: m.content })
        last.content = blocks
      } else messages.push({ role: m.role, content: m.content })
    }
  }
  return { system: system.join('\n\n'), messages }
}

/** A tool call's arguments as the object `tool_use.input` must be (what is not a JSON object travels as `{}`). */
function parseInput(args: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(args === '' ? '{}' : args)
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {}
  } catch {
    return {}
  }
}

const toTool = (d: ToolDefinition): Tool => ({
  name: d.function.name,
  ...(d.function.description ? { description: d.function.description } : {}),
  input_schema: (d.function.parameters ?? { type: 'object', properties: {} }) as Tool['input_schema']
})

/**
 * A run's settings as Messages API parameters; json_object has no native form, so it is asked for in
 * words.
 */
function requestSettings(s: RunSettings): { params: Partial<MessageCreateParamsBase>; system: string | null } {
  const params: Partial<MessageCreateParamsBase> & { temperature?: number } = {
    max_tokens: s.maxOutputTokens ?? ANTHROPIC_DEFAULT_MAX_TOKENS
  }
  // the SDK's types no longer list temperature (newer models ignore or refuse it); it is
  // sent as asked, within the API's 0 to 1, and a model that refuses it says so in the run's error
  if (s.temperature !== undefined) params.temperature = Math.min(1, s.temperature)
  const f = s.responseFormat
  if (f?.type === 'json_schema')
    params.output_config = { format: { type: 'json_schema', schema: f.schema as Record<string, unknown> } }
  return { params, system: f?.type === 'json_object' ? 'Answer with one JSON object and nothing else.' : null }
}

/**
 * The Anthropic Messages API through the official `@anthropic-ai/sdk`: its MessageStream
 * makes the request (`x-api-key`, `anthropic-version`), parses the events and puts the
 * content blocks together (tool_use inputs included); the SDK's own retries are off
 * (model-call.ts retries, reporting each as a `model.retry` event).
 */
function anthropicProtocol(opts: AnthropicOptions, base: string): ModelProtocol {
  // the SDK is loaded at the first call: a process that never calls Anthropic never loads it
  let loading: Promise<{ client: Anthropic; APIError: typeof Anthropic.APIError }> | undefined
  const sdk = () =>
    (loading ??= import('@anthropic-ai/sdk').then(({ default: SDK }) => ({
      client: newClient(SDK),
      APIError: SDK.APIError
    })))
  const newClient = (SDK: typeof Anthropic) =>
    new SDK({
      baseURL: base,
      // a key given here keeps the SDK from looking for credentials in the environment or in
      // config files: an org provider's client uses its own key only. It travels as
      // `x-api-key`, the Messages API's documented header, not as a bearer token.
      apiKey: opts.apiKey || 'none',
      defaultHeaders: {
        Authorization: null,
        'anthropic-version': ANTHROPIC_VERSION,
        ...(opts.apiKey ? { 'x-api-key': opts.apiKey } : {})
      },
      maxRetries: 0,
      timeout: opts.timeoutMs,
      logLevel: 'off',
      ...(opts.fetch ? { fetch: opts.fetch as typeof fetch } : {})
    })
  return {
    load: sdk,
    async listModels(signal) {
      const { client } = await sdk()
      const page = await client.models.list({}, { signal })
      return page.data.map((m) => m.id).filter((id): id is string => typeof id === 'string')
    },
    async call(req) {
      const { client, APIError } = await sdk()
      const { system, messages } = toAnthropic(req.messages)
      const { params, system: formatSystem } = requestSettings(req.settings)
      const systemText = [system, formatSystem].filter(Boolean).join('\n\n')
      const stream = client.messages.stream(
        {
          model: req.model,
          messages,
          ...(systemText ? { system: systemText } : {}),
          ...(req.tools.length > 0 ? { tools: req.tools.map(toTool) } : {}),
          ...params,
          max_tokens: params.max_tokens!
        },
        // the provider may continue the run's trace (docs/observability.md)
        { signal: req.signal, headers: traceHeaders() }
      )
      // the SDK's word for a stream that ended before its message began: a cut like any other
      const cutOr = (err: unknown): never => {
        if (!(err instanceof APIError) && err instanceof Error && /stream ended without/.test(err.message))
          throw new StreamCut()
        throw err
      }
      let text = ''
      try {
        for await (const event of stream) {
          req.onProgress()
          if (
            (event.type === 'content_block_delta' && (event.delta.type !== 'text_delta' || event.delta.text !== '')) ||
            (event.type === 'content_block_start' && event.content_block.type === 'tool_use')
          )
            req.onContent()
          if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') {
            text += event.delta.text
            await req.onDelta(event.delta.text)
          }
        }
      } catch (err) {
        cutOr(err)
      }
      if (req.signal.aborted) return { text, usage: { promptTokens: 0, completionTokens: 0 }, toolCalls: [] }
      const message = await stream.finalMessage().catch(cutOr)
      if (!message.stop_reason) throw new StreamCut()
      const toolCalls: ToolCall[] = message.content
        .filter((b) => b.type === 'tool_use')
        .map((b) => ({
          id: b.id,
          type: 'function',
          function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) }
        }))
      const u = message.usage
      const promptTokens =
        (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0)
      return {
        text,
        usage: { promptTokens, completionTokens: u.output_tokens ?? 0 },
        toolCalls,
        finishReason: message.stop_reason
      }
    }
  }
}

/** Anthropic's Messages API (the deployment's ANTHROPIC_* settings, or an org provider of kind `anthropic`). */
export function anthropicEngine(opts: AnthropicOptions): Engine {
  return protocolEngine('anthropic', 'Anthropic', opts, (base) => anthropicProtocol(opts, base))
}
