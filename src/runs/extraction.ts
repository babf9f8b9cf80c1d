// After a run succeeds, its model is asked once for the durable facts of the
// exchange, which join the run's capture. A failure never fails the run.
import type { ChatMessage, WireMessage } from './engines/types.js'

/** The most facts one extraction keeps, and the longest. */
export const MAX_EXTRACTED = 10
export const MAX_EXTRACTED_CHARS = 500

const INSTRUCTIONS = `You pick out what is worth remembering from a conversation between a person and an AI assistant.
Answer with a JSON object {"facts": [...]}: at most ${MAX_EXTRACTED} short statements, each under ${MAX_EXTRACTED_CHARS} characters and understandable on its own, about the person, their team or organization, their preferences, decisions, conventions and how their systems work, that will still be true and useful in later conversations.
Leave out greetings, the details of this one task, guesses, and anything secret (passwords, keys, tokens).
Answer {"facts": []} when there is nothing worth keeping.`

/** How much of the thread's earlier conversation the extraction sees, at most (its newest part). */
export const EXTRACTION_CONTEXT_CHARS = 8000

const WITH_CONTEXT = `The latest exchange continues an earlier conversation, given for context. Take facts from the latest exchange only, and use the earlier turns to say what it refers to: write "Beacon pages the on-call every 5 minutes", not "it pages the on-call every 5 minutes".`

/**
 * The extraction call's messages: the instructions, then the exchange as one user message; in a thread, the newest
 * earlier turns (their texts, within EXTRACTION_CONTEXT_CHARS) come first, so a fact stated over two turns keeps its
 * subject.
 */
export function extractionMessages(
  prompt: string,
  output: string,
  earlier: readonly WireMessage[] = []
): ChatMessage[] {
  const exchange = `Person: ${prompt}\n\nAssistant: ${output}`
  const lines: string[] = []
  let left = EXTRACTION_CONTEXT_CHARS
  for (let i = earlier.length - 1; i >= 0; i--) {
    const m = earlier[i]!
    if ((m.role !== 'user' && m.role !== 'assistant') || !m.content) continue
    const line = `${m.role === 'user' ? 'Person' : 'Assistant'}: ${m.content}`
    if (line.length > left) break
    left -= line.length
    lines.unshift(line)
  }
  if (lines.length === 0)
    return [
      { role: 'system', content: INSTRUCTIONS },
      { role: 'user', content: exchange }
    ]
  return [
    { role: 'system', content: `${INSTRUCTIONS}\n${WITH_CONTEXT}` },
    {
      role: 'user',
      content: `Earlier in this conversation:\n${lines.join('\n\n')}\n\nThe latest exchange:\n${exchange}`
    }
  ]
}

/** The facts of the model's answer, or why it is not one: `{"facts": [string]}`, at most 10, longer ones left out. */
export function parseExtraction(text: string): { facts: string[] } | { error: string } {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return { error: 'the model did not answer a JSON object' }
  }
  const facts = (value as { facts?: unknown } | null)?.facts
  if (!Array.isArray(facts)) return { error: 'the model\'s answer has no "facts" list' }
  return {
    facts: facts
      .filter((f): f is string => typeof f === 'string')
      .map((f) => f.trim())
      .filter((f) => f !== '' && f.length <= MAX_EXTRACTED_CHARS)
      .slice(0, MAX_EXTRACTED)
  }
}
