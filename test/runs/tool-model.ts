import type { Teardown } from '../helper.js'
import { startOpenAiUpstream } from './openai-upstream.js'

/**
 * One scripted model answer: text, or tool calls (streamed in pieces, as OpenAI does); `after`: answered once it
 * resolves.
 */
export type Answer = ({ text: string } | { calls: Array<{ id: string; name: string; arguments: string }> }) & {
  after?: Promise<void>
}

export interface ToolModel {
  url: string
  requests: Array<{ body: any }>
  /** answers in order; when empty the model asks for `shell` again (the endless case) */
  script: Answer[]
}

/**
 * A local OpenAI-compatible model (`tool-model`) that answers from `script`, with tool calls, and records every
 * request.
 */
export async function startToolModel(t: Teardown): Promise<ToolModel> {
  const state: ToolModel = { url: '', requests: [], script: [] }
  state.url = await startOpenAiUpstream(t, {
    models: ['tool-model'],
    async chat(body, stream) {
      state.requests.push({ body })
      const answer: Answer = state.script.shift() ?? {
        calls: [{ id: `again-${state.requests.length}`, name: 'shell', arguments: '{"command":"true"}' }]
      }
      if (answer.after) await answer.after
      const chat = stream()
      if ('text' in answer) {
        for (const piece of answer.text.match(/.{1,4}/gs) ?? []) chat.delta({ content: piece })
      } else {
        chat.delta({ role: 'assistant', content: null })
        answer.calls.forEach((call, index) => {
          // id and name first, then the arguments in two pieces
          chat.delta({
            tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }]
          })
          const half = Math.floor(call.arguments.length / 2)
          chat.delta({ tool_calls: [{ index, function: { arguments: call.arguments.slice(0, half) } }] })
          chat.delta({ tool_calls: [{ index, function: { arguments: call.arguments.slice(half) } }] })
        })
      }
      chat.end({ prompt_tokens: 5, completion_tokens: 2 })
    }
  })
  return state
}

/** The model asks for one `shell` call. */
export const shellCall = (command: string, id = 'call_1'): Answer => ({
  calls: [{ id, name: 'shell', arguments: JSON.stringify({ command }) }]
})
