// What an engine is and what it is given: the one interface the run worker and the chat
// route call, whichever engine answers.
import type { SavedArtifact } from '../ports/artifacts.js'
import type { ProposedDraft } from '../ports/knowledge.js'
import type { RecalledItem } from '../ports/memory.js'
import type { ProposedSkill } from '../ports/skills.js'
import type { RunSettings, SuspendedRun } from '../tables.js'

/** An engine as GET /api/config lists it. */
export interface EngineInfo {
  id: string
  name: string
}
/** A model an engine offers, as GET /api/config and GET /api/models list it. */
export interface ModelInfo {
  id: string
  engine: string
  name: string
}

/** What an engine gets while it runs one run. */
export interface EngineContext {
  runId: string
  prompt: string
  model: string | null
  /** the run's instructions: its first system message */
  instructions: string | null
  /**
   * the thread's earlier succeeded turns, oldest first: each one's transcript (its user message, assistant messages,
   * tool calls each followed by its result), or its prompt and answer when it has none
   */
  history: WireMessage[]
  /**
   * the run's attachments: their workspace paths, and what the user message says of them; null without
   */
  attachments: { paths: string[]; message: string } | null
  /** where a run that waited for approvals goes on from; null for a fresh start */
  resume: SuspendedRun | null
  /**
   * Where the run could go on from now without executing a tool call again (each call's
   * result as it arrives, and the round once complete): a run handed back to the queue
   * (shutdown, the database away) resumes there instead of starting over.
   */
  checkpoint?(state: SuspendedRun): void | Promise<void>
  /** temperature, output limit, response format, tools (each absent unless the run set it) */
  settings: RunSettings
  /** adds one model call's tokens to the run's usage (kept whatever the run's end) */
  reportUsage(usage: { promptTokens: number; completionTokens: number }): void
  /** aborted on cancel, on shutdown and when the worker loses the run */
  signal: AbortSignal
  /** stores and publishes an event of this run (awaited: stored before it is sent) */
  emit(type: string, data: Record<string, unknown>): Promise<void>
  /** recalls from the run's memory pools; emits `memory.recalled` */
  recall(query: string): Promise<RecalledItem[]>
  /** the agent runtime's tools for this run; absent when no tool gateway is available */
  tools?: RunTools | undefined
  /** saves text as an artifact of this run; emits `artifact.created` */
  saveArtifact(name: string, content: string, contentType: string): Promise<SavedArtifact>
  /** proposes knowledge: an open draft in the org's learning lane */
  proposeKnowledge(draft: { title: string; body: string }): Promise<ProposedDraft>
  /** proposes a SKILL.md: an open proposal in the org's learning lane, or why not */
  proposeSkill(proposal: { skillMd: string; skillId?: string | undefined }): Promise<ProposedSkill>
}

/** An OpenAI `tools` entry. */
export interface ToolDefinition {
  type: 'function'
  function: { name: string; description?: string; parameters: unknown }
}

/**
 * The tool gateway as an engine sees it (kept free of Fastify): the definitions to offer
 * and one call at a time, recorded as `tool.call` / `tool.result` run events. A call that
 * needs a person's decision answers `pending` (its approval id) at once; with `defer`, a
 * call that needs none answers `deferred`, unexecuted; with `approvalId`, a call asked
 * before runs (approved) or is answered denied.
 */
export interface RunTools {
  definitions(): ToolDefinition[]
  execute(call: {
    callId: string
    name: string
    arguments: string
    signal: AbortSignal
    defer?: boolean
    approvalId?: string | undefined
    /** the model round that asked for it (a call id may come back in a later round) */
    round?: number | undefined
  }): Promise<ToolAnswer>
}

export type ToolAnswer = { content: string } | { pending: string } | { deferred: true }

/** Thrown by an engine whose tool round waits for people's decisions: the worker stores `state` and frees its slot. */
export class RunSuspended extends Error {
  override name = 'RunSuspended'
  readonly state: SuspendedRun

  constructor(state: SuspendedRun) {
    super('the run waits for people to decide its tool calls')
    this.state = state
  }
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
  /** the conversation as sent and received, from the run's user message to its final answer (the run's transcript) */
  transcript?: WireMessage[] | undefined
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
}

/** What the tool loop sends: chat messages plus assistant tool calls and tool results. */
export type WireMessage =
  | ChatMessage
  | { role: 'assistant'; content: string | null; tool_calls: ToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string }

export interface ChatStream {
  onToken(text: string): void
}

export interface Engine {
  readonly id: string
  readonly name: string
  /** false for an engine that never calls tools (echo): nothing is listed for its runs */
  readonly callsTools?: boolean
  /** false: not configured on this server (no base URL); it offers nothing */
  readonly configured?: boolean
  /** configured and reachable right now (may be cached) */
  ready(): Promise<boolean>
  models(): Promise<ModelInfo[]>
  /**
   * The models it is configured with, reachable or not (what the default model and a run naming a model are
   * resolved from, never from whether a probe answered in time); its `models()` when absent
   */
  configuredModels?(): Promise<ModelInfo[]>
  run(ctx: EngineContext): Promise<EngineResult>
  chat(
    messages: ChatMessage[],
    model: string | null,
    signal: AbortSignal,
    out: ChatStream
  ): Promise<{ promptTokens: number; completionTokens: number }>
  /** one call, not streamed to anyone, with the run's settings (memory extraction asks for a JSON object) */
  complete(
    messages: ChatMessage[],
    model: string | null,
    settings: RunSettings,
    signal: AbortSignal
  ): Promise<{ text: string; usage: { promptTokens: number; completionTokens: number } }>
}

/** An engine failure with the text that ends up in the run's `error`. */
export class EngineError extends Error {
  override name = 'EngineError'
}

/**
 * The model could not be reached (`model_unavailable: <who> <why>`): its retries were spent, or its provider's
 * breaker is open. `retryAfterMs`: when trying again may help.
 */
export class ModelUnavailable extends EngineError {
  override name = 'ModelUnavailable'
  readonly retryAfterMs: number

  constructor(message: string, retryAfterMs: number, options?: { cause: string }) {
    super(message, options)
    this.retryAfterMs = retryAfterMs
  }
}

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
export const abortable = (ms: number, signal: AbortSignal) =>
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
