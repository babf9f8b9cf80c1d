// A run's transcript in the console: the model conversation the server keeps with the run
// (GET /api/threads/:id carries each run's, GET /api/runs/:id/messages one run's), so a
// finished turn's tool calls and results are shown without reading its events again. Every
// part is text in the page, never HTML.
import type { ThreadWithRuns } from '../api.js'

export type TranscriptMessage = ThreadWithRuns['runs'][number]['messages'][number]
/** GET /api/runs/:id/messages */
export interface TranscriptReply {
  items: TranscriptMessage[]
}

/** What a tool answers when a person denied its call (the server's own words). */
export const DENIED_CONTENT = 'the call was denied by a person'

/** One tool call of a transcript: what the model asked (and said before asking), and the result it was given. */
export interface TranscriptCall {
  callId: string
  tool: string
  /** the arguments as the model wrote them (JSON text) */
  arguments: string
  /** the assistant's text in the same message, before its calls (on the first call of the message only) */
  said: string
  /** the result the model saw, or null when it got none (the run ended first) */
  result: string | null
  denied: boolean
}

/** The tool calls of a transcript, in order, each with its result. */
export function callsOf(messages: readonly TranscriptMessage[]): TranscriptCall[] {
  const results = new Map<string, string>()
  for (const m of messages) if (m.role === 'tool' && m.toolCallId) results.set(m.toolCallId, m.content)
  const calls: TranscriptCall[] = []
  for (const m of messages) {
    if (m.role !== 'assistant' || !m.toolCalls) continue
    m.toolCalls.forEach((c, i) => {
      const result = results.get(c.id) ?? null
      calls.push({
        callId: c.id,
        tool: c.name,
        arguments: c.arguments,
        said: i === 0 ? m.content : '',
        result,
        denied: result === DENIED_CONTENT
      })
    })
  }
  return calls
}

/** Arguments (JSON text) laid out for reading; text that is not JSON as it is. */
export function prettyArguments(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2)
  } catch {
    return text
  }
}

/** A finished turn's tool calls, from its transcript: each call's tool and arguments, then its result. */
export function TranscriptCalls({ messages }: { messages: readonly TranscriptMessage[] }) {
  const calls = callsOf(messages)
  if (calls.length === 0) return null
  return (
    <ol class="tool-calls" aria-label="Tool calls">
      {calls.map((c) => (
        <li key={c.callId}>
          {c.said !== '' ? <p class="content said">{c.said}</p> : null}
          <p>
            <strong>{c.tool}</strong> <code>{c.arguments}</code>
            <span class="muted"> · {c.result === null ? 'no result' : c.denied ? 'denied' : 'answered'}</span>
          </p>
          {/* focusable: a long result scrolls in its box, and the keyboard scrolls it */}
          {c.result !== null ? (
            <pre class="tool-result" tabIndex={0} aria-label={`Result of ${c.tool}`}>
              {c.result}
            </pre>
          ) : null}
        </li>
      ))}
    </ol>
  )
}

const ROLE_LABEL: Record<TranscriptMessage['role'], string> = {
  user: 'Person',
  assistant: 'Assistant',
  tool: 'Tool result'
}

/**
 * The whole transcript of one run, message by message: the person's message, the assistant's
 * text, each tool call with its arguments and each result as the model saw it. Arguments and
 * results open with the keyboard (details/summary).
 */
export function TranscriptView({ messages }: { messages: readonly TranscriptMessage[] }) {
  return (
    <ol class="transcript" aria-label="The run's conversation with its model">
      {messages.map((m, i) => (
        <li key={i} class={`message message-${m.role}`}>
          <p class="message-role">
            {ROLE_LABEL[m.role]}
            {m.role === 'tool' && m.name ? (
              <>
                {' '}
                of <code>{m.name}</code>
              </>
            ) : null}
          </p>
          {m.role === 'tool' ? (
            <details>
              <summary>Result{m.name ? ` of ${m.name}` : ''}</summary>
              <pre class="content tool-result">{m.content}</pre>
            </details>
          ) : m.content !== '' ? (
            <p class="content">{m.content}</p>
          ) : null}
          {m.toolCalls && m.toolCalls.length > 0 ? (
            <ul class="transcript-calls" aria-label="Tool calls asked for">
              {m.toolCalls.map((c) => (
                <li key={c.id}>
                  <details>
                    <summary>
                      Call <code>{c.name}</code>: arguments
                    </summary>
                    <pre class="content">{prettyArguments(c.arguments)}</pre>
                  </details>
                </li>
              ))}
            </ul>
          ) : null}
        </li>
      ))}
    </ol>
  )
}
