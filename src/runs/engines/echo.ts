import { abortable, type Engine, type ModelInfo } from './types.js'

/** Sentences of the prompt that mention "remember" (any case): the echo engine's captures. */
export function rememberSentences(prompt: string): string[] {
  return prompt
    .split(/(?<=[.!?])\s+|\n+/)
    .map((s) => s.trim())
    .filter((s) => s !== '' && /\bremember\b/i.test(s))
}

/** The `fact: <text>` lines of a text (any case): what echo extracts as facts (offline). */
export function factLines(text: string): string[] {
  return text
    .split('\n')
    .map((line) => /^\s*(?:person:\s*)?fact:\s*(.*?)\s*$/i.exec(line)?.[1] ?? '')
    .filter((f) => f !== '')
}

const words = (text: string) => text.split(/\s+/).filter(Boolean)

/** The names of the prompt's `artifact: <name>` lines, each once, in order. */
export function artifactNames(prompt: string): string[] {
  const names = prompt
    .split('\n')
    .map((line) => /^\s*artifact:\s*(.*?)\s*$/i.exec(line)?.[1] ?? '')
    .filter((n) => n !== '')
  return [...new Set(names)]
}

/**
 * The drafts of the prompt's `learn:` lines, in order; the rest of the line is
 * the body and, cut to 80 characters, the title.
 */
export function learnedDrafts(prompt: string): Array<{ title: string; body: string }> {
  return prompt
    .split('\n')
    .map((line) => /^\s*learn:\s*(.*?)\s*$/i.exec(line)?.[1] ?? '')
    .filter((body) => body !== '')
    .map((body) => ({ title: [...body].slice(0, 80).join(''), body }))
}

/**
 * The prompt's fenced ```skill blocks, in order: each is a SKILL.md the echo engine proposes,
 * so the learning lane can be exercised offline.
 */
export function proposedSkillFiles(prompt: string): string[] {
  return [...prompt.replace(/\r\n?/g, '\n').matchAll(/^[ \t]*```skill[ \t]*\n([\s\S]*?)\n[ \t]*```[ \t]*$/gm)].map(
    (m) => m[1]!
  )
}

/**
 * What echo answers: the prompt itself, except for the prompt `history`, answered with the
 * conversation it was given (testable offline): `history: 2 turns: first
 * prompt | second prompt`.
 */
export function echoAnswer(
  prompt: string,
  history: ReadonlyArray<{ role: string; content: string | null }>,
  attachments: string[] = []
): string {
  if (prompt.trim().toLowerCase() === 'attachments')
    return `attachments: ${attachments.length} files${attachments.length > 0 ? `: ${attachments.join(' | ')}` : ''}`
  if (prompt.trim().toLowerCase() !== 'history') return prompt
  const asked = history.filter((m) => m.role === 'user').map((m) => m.content)
  return `history: ${asked.length} turns${asked.length > 0 ? `: ${asked.join(' | ')}` : ''}`
}

/** The echo engine: offline, deterministic, always ready; streams the prompt back word by word. */
export function echoEngine(opts: { wordDelayMs: number }): Engine {
  const model: ModelInfo = { id: 'echo', engine: 'echo', name: 'Echo (offline)' }
  return {
    id: 'echo',
    name: 'Echo (offline, for development and tests)',
    callsTools: false,
    async ready() {
      return true
    },
    async models() {
      return [model]
    },
    async run(ctx) {
      await ctx.recall(ctx.prompt)
      const parts = words(echoAnswer(ctx.prompt, ctx.history, ctx.attachments?.paths))
      const format = ctx.settings.responseFormat?.type
      let text: string
      if (format === 'json_object' || format === 'json_schema') {
        // offline: a fixed JSON object, checked against the schema like a model's
        text = JSON.stringify({ echo: parts.join(' ') })
        if (ctx.signal.aborted) throw ctx.signal.reason
        await ctx.emit('message.delta', { text })
      } else {
        for (let i = 0; i < parts.length; i++) {
          if (i > 0) await abortable(opts.wordDelayMs, ctx.signal)
          else if (ctx.signal.aborted) throw ctx.signal.reason
          await ctx.emit('message.delta', { text: i === 0 ? parts[i] : ` ${parts[i]}` })
        }
        text = parts.join(' ')
      }
      await ctx.emit('message.completed', { text })
      for (const name of artifactNames(ctx.prompt)) await ctx.saveArtifact(name, text, 'text/markdown')
      for (const draft of learnedDrafts(ctx.prompt)) await ctx.proposeKnowledge(draft)
      for (const skillMd of proposedSkillFiles(ctx.prompt)) await ctx.proposeSkill({ skillMd })
      // no model was called, so no tokens were spent: the run's usage stays null
      return { text, facts: rememberSentences(ctx.prompt) }
    },
    async complete(messages, _model, settings) {
      // memory extraction, offline: the `fact:` lines of the person's message are its facts
      const last = [...messages].reverse().find((m) => m.role === 'user')?.content ?? ''
      const text = settings.responseFormat?.type === 'json_object' ? JSON.stringify({ facts: factLines(last) }) : last
      return {
        text,
        usage: {
          promptTokens: messages.reduce((n, m) => n + words(m.content ?? '').length, 0),
          completionTokens: words(text).length
        }
      }
    },
    async chat(messages, _model, signal, out) {
      const last = [...messages].reverse().find((m) => m.role === 'user')
      const parts = words(last?.content ?? '')
      for (let i = 0; i < parts.length; i++) {
        if (i > 0) await abortable(opts.wordDelayMs, signal)
        out.onToken(i === 0 ? parts[i]! : ` ${parts[i]}`)
      }
      const promptTokens = messages.reduce((n, m) => n + words(m.content ?? '').length, 0)
      return { promptTokens, completionTokens: parts.length }
    }
  }
}
