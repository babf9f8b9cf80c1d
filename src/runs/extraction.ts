// Contract 13.5: after a run succeeds, its model is asked once for the durable facts of the
// exchange, which join the run's capture. A failure never fails the run.
import type { ChatMessage } from './engines/types.js'

/** The most facts one extraction keeps, and the longest. */
export const MAX_EXTRACTED = 10
export const MAX_EXTRACTED_CHARS = 500

const INSTRUCTIONS = `You pick out what is worth remembering from a conversation between a person and an AI assistant.
Answer with a JSON object {"facts": [...]}: at most ${MAX_EXTRACTED} short statements, each under ${MAX_EXTRACTED_CHARS} characters and understandable on its own, about the person, their team or organization, their preferences, decisions, conventions and how their systems work, that will still be true and useful in later conversations.
Leave out greetings, the details of this one task, guesses, and anything secret (passwords, keys, tokens).
Answer {"facts": []} when there is nothing worth keeping.`

/** The extraction call's messages: the instructions, then the exchange as one user message. */
export function extractionMessages(prompt: string, output: string): ChatMessage[] {
  return [
    { role: 'system', content: INSTRUCTIONS },
    { role: 'user', content: `Person: ${prompt}\n\nAssistant: ${output}` }
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
