// A run as a timeline, from its event stream: each model call (its model, how long it took,
// its retries), each tool call (its arguments, its result, the person's decision when it
// needed one), each memory recall, and the run's tokens. Every part is text in the page
// (never HTML), and the arguments and results open with the keyboard (details/summary).
import { useEffect, useState } from 'preact/hooks'
import type { RunEventFrame } from '../api.js'
import { shortId } from '../ui.js'
import { callsOf, type TranscriptMessage } from './transcript.js'

/** The event types the timeline reads (the stream sends others too; message.delta is left out: the text is above). */
const TIMELINE_EVENTS = [
  'run.started',
  'memory.recalled',
  'model.retry',
  'message.completed',
  'tool.call',
  'tool.result',
  'approval.requested',
  'approval.resolved',
  'approval.expired',
  'run.requires_action',
  'run.succeeded',
  'run.failed',
  'run.cancelled'
] as const

interface Frame {
  type: string
  at: number
  data: Record<string, unknown>
}

export interface Retry {
  attempt: number
  status: number | null
  waitMs: number
}

export type Step =
  | { kind: 'start'; at: number; model: string | null; resumed: boolean }
  | { kind: 'recall'; at: number; ms: number; count: number; query: string }
  | { kind: 'model'; at: number; ms: number; model: string | null; retries: Retry[]; outcome: string }
  | {
      kind: 'tool'
      at: number
      ms: number | null
      callId: string
      tool: string
      arguments: unknown
      status: string | null
      content: string | null
      truncated: boolean
      approval: {
        requestedAt: number
        resolvedAt: number | null
        status: string | null
        decidedBy: string | null
      } | null
    }
  | { kind: 'waiting'; at: number }
  | {
      kind: 'end'
      at: number
      status: string
      error: string | null
      usage: { promptTokens: number; completionTokens: number } | null
    }

const num = (v: unknown, fallback = 0) => (typeof v === 'number' && Number.isFinite(v) ? v : fallback)
const str = (v: unknown) => (typeof v === 'string' ? v : null)

/** Who decided a tool call, as a person reads it: you, another person, an API key (an integration) or a Slack user. */
function deciderName(decidedBy: string, me: string | null | undefined): string {
  if (decidedBy === me) return 'you'
  if (decidedBy.startsWith('key:')) return `API key ${shortId(decidedBy.slice(4))}`
  if (decidedBy.startsWith('slack:')) return `Slack user ${decidedBy.slice(6)}`
  return `user ${shortId(decidedBy)}`
}

/**
 * The steps of a run from its events, in order. A model call is not an event of its own: it
 * is the time from what came before it (the start, a recall, the last result of a round of
 * tool calls) to what it produced (a tool call, the answer, a failure), with the retries
 * in between.
 */
export function timelineOf(frames: readonly Frame[]): Step[] {
  const steps: Step[] = []
  const tools = new Map<string, Extract<Step, { kind: 'tool' }>>()
  const open = new Set<string>()
  let model: string | null = null
  let since = 0
  let asked = true
  let retries: Retry[] = []
  const modelCall = (at: number, outcome: string) => {
    if (asked) return
    steps.push({ kind: 'model', at: since, ms: Math.max(0, at - since), model, retries, outcome })
    retries = []
    asked = true
  }
  for (const f of frames) {
    const d = f.data
    switch (f.type) {
      case 'run.started': {
        model = str(d.model) ?? model
        const resumed = d.resumed === true
        steps.push({ kind: 'start', at: f.at, model, resumed })
        since = f.at
        // going on after people decided: the decided calls run first, then the model is asked
        asked = resumed && open.size > 0
        break
      }
      case 'memory.recalled':
        steps.push({
          kind: 'recall',
          at: since,
          ms: Math.max(0, f.at - since),
          count: num(d.count),
          query: str(d.query) ?? ''
        })
        since = f.at
        break
      case 'model.retry':
        retries.push({
          attempt: num(d.attempt),
          status: typeof d.status === 'number' ? d.status : null,
          waitMs: num(d.waitMs)
        })
        break
      case 'message.completed':
        modelCall(f.at, 'answer')
        break
      case 'tool.call': {
        modelCall(f.at, 'tool calls')
        const callId = String(d.callId)
        if (tools.has(callId)) break
        const step: Extract<Step, { kind: 'tool' }> = {
          kind: 'tool',
          at: f.at,
          ms: null,
          callId,
          tool: String(d.tool),
          arguments: d.arguments,
          status: null,
          content: null,
          truncated: false,
          approval: null
        }
        tools.set(callId, step)
        open.add(callId)
        steps.push(step)
        break
      }
      case 'approval.requested': {
        const step = tools.get(String(d.callId))
        if (step) step.approval = { requestedAt: f.at, resolvedAt: null, status: null, decidedBy: null }
        break
      }
      case 'approval.resolved': {
        const step = tools.get(String(d.callId))
        if (step?.approval) {
          step.approval.resolvedAt = f.at
          step.approval.status = str(d.status)
          step.approval.decidedBy = str(d.decidedBy)
        }
        break
      }
      case 'approval.expired': {
        // nobody decided in time: the call is answered as expired
        const step = tools.get(String(d.callId))
        if (step?.approval) {
          step.approval.resolvedAt = f.at
          step.approval.status = 'expired'
        }
        break
      }
      case 'tool.result': {
        const step = tools.get(String(d.callId))
        if (step) {
          step.status = str(d.status)
          step.content = str(d.content)
          step.truncated = d.truncated === true
          step.ms = Math.max(0, f.at - step.at)
        }
        open.delete(String(d.callId))
        if (open.size === 0) {
          // the round's results are all in: the model is asked again
          since = f.at
          asked = false
        }
        break
      }
      case 'run.requires_action':
        steps.push({ kind: 'waiting', at: f.at })
        break
      case 'run.succeeded':
      case 'run.failed':
      case 'run.cancelled': {
        if (f.type === 'run.failed' && (retries.length > 0 || /^upstream_/.test(str(d.error) ?? '')))
          modelCall(f.at, 'failed')
        const usage = d.usage as { promptTokens?: unknown; completionTokens?: unknown } | null | undefined
        steps.push({
          kind: 'end',
          at: f.at,
          status: f.type.slice('run.'.length),
          error: str(d.error),
          usage: usage ? { promptTokens: num(usage.promptTokens), completionTokens: num(usage.completionTokens) } : null
        })
        break
      }
    }
  }
  return steps
}

/** A duration in words a person reads at a glance. */
export function duration(ms: number | null): string {
  if (ms === null) return 'still running'
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`
}

const pretty = (value: unknown) => {
  if (typeof value === 'string') {
    try {
      return JSON.stringify(JSON.parse(value), null, 2)
    } catch {
      return value
    }
  }
  return JSON.stringify(value, null, 2)
}

/** Follows the run's events (the stored history, then live) and keeps those the timeline reads. */
function useTimelineFrames(id: string): Frame[] {
  const [frames, setFrames] = useState<Frame[]>([])
  useEffect(() => {
    setFrames([])
    const source = new EventSource(`/api/runs/${encodeURIComponent(id)}/events`)
    for (const type of TIMELINE_EVENTS) {
      source.addEventListener(type, (event) => {
        let frame: RunEventFrame
        try {
          frame = JSON.parse((event as MessageEvent<string>).data) as RunEventFrame
        } catch {
          return
        }
        const at = Date.parse(frame.createdAt)
        setFrames((list) => [...list, { type, at: Number.isFinite(at) ? at : Date.now(), data: frame.data }])
      })
    }
    source.addEventListener('end', () => source.close())
    return () => source.close()
  }, [id])
  return frames
}

function StepView({ step, me }: { step: Step; me: string | null }) {
  switch (step.kind) {
    case 'start':
      return (
        <>
          <span class="step-title">{step.resumed ? 'Went on after the decision' : 'Started'}</span>
          {step.model ? <span class="step-meta">model {step.model}</span> : null}
        </>
      )
    case 'recall':
      return (
        <>
          <span class="step-title">Memory recall</span>
          <span class="step-meta">
            {step.count === 1 ? '1 fact' : `${step.count} facts`} · {duration(step.ms)}
          </span>
          {step.query !== '' ? <p class="step-detail">Searched for: {step.query}</p> : null}
        </>
      )
    case 'model':
      return (
        <>
          <span class="step-title">Model call{step.model ? `: ${step.model}` : ''}</span>
          <span class="step-meta">
            {duration(step.ms)} · {step.outcome}
            {step.retries.length > 0
              ? ` · ${step.retries.length} ${step.retries.length === 1 ? 'retry' : 'retries'}`
              : ''}
          </span>
          {step.retries.length > 0 ? (
            <ul class="step-detail">
              {step.retries.map((r) => (
                <li key={r.attempt}>
                  Retry {r.attempt}: {r.status === null ? 'no connection' : `HTTP ${r.status}`}, waited{' '}
                  {duration(r.waitMs)}
                </li>
              ))}
            </ul>
          ) : null}
        </>
      )
    case 'tool': {
      const a = step.approval
      const decider = a?.decidedBy ? deciderName(a.decidedBy, me) : null
      return (
        <>
          <span class="step-title">
            Tool call: <code>{step.tool}</code>
          </span>
          <span class="step-meta">
            {step.status ?? (a && a.resolvedAt === null ? 'waiting for a decision' : 'running')} · {duration(step.ms)}
          </span>
          {a ? (
            <p class="step-detail">
              {a.resolvedAt === null
                ? 'Needs a person’s approval.'
                : `${a.status === 'approved' ? 'Approved' : a.status === 'denied' ? 'Denied' : `Decision: ${a.status ?? 'none'}`}${decider ? ` by ${decider}` : ''} after ${duration(a.resolvedAt - a.requestedAt)}.`}
            </p>
          ) : null}
          <details>
            <summary>Arguments of {step.tool}</summary>
            <pre class="content">{pretty(step.arguments)}</pre>
          </details>
          {step.content !== null ? (
            <details>
              <summary>Result of {step.tool}</summary>
              <pre class="content">
                {step.content}
                {step.truncated ? '\n[cut: the result was longer]' : ''}
              </pre>
            </details>
          ) : null}
        </>
      )
    }
    case 'waiting':
      return <span class="step-title">Waiting for people to decide (the run left its worker)</span>
    case 'end':
      return (
        <>
          <span class="step-title">Run {step.status}</span>
          {step.usage ? (
            <span class="step-meta">
              tokens: {step.usage.promptTokens} in, {step.usage.completionTokens} out (whole run)
            </span>
          ) : null}
          {step.error ? <p class="step-detail">{step.error}</p> : null}
        </>
      )
  }
}

/**
 * A tool step's arguments and result from the run's transcript where its events lack them (the
 * transcript is kept with the run; events may be older than their retention, or cut).
 */
export function withTranscript(steps: Step[], transcript: readonly TranscriptMessage[]): Step[] {
  if (transcript.length === 0) return steps
  const calls = new Map(callsOf(transcript).map((c) => [c.callId, c]))
  return steps.map((step) => {
    if (step.kind !== 'tool') return step
    const call = calls.get(step.callId)
    if (!call) return step
    return {
      ...step,
      arguments: step.arguments === undefined || step.arguments === null ? call.arguments : step.arguments,
      content: step.content ?? call.result
    }
  })
}

/**
 * The run's timeline; `me` is the signed-in person's id (a decision of theirs reads "you"); `transcript` fills in the
 * tool calls' arguments and results.
 */
export function RunTimeline({
  id,
  me = null,
  transcript = []
}: {
  id: string
  me?: string | null
  transcript?: readonly TranscriptMessage[]
}) {
  const steps = withTranscript(timelineOf(useTimelineFrames(id)), transcript)
  return (
    <section aria-labelledby="timeline-title">
      <h2 id="timeline-title">Timeline</h2>
      {steps.length === 0 ? (
        <p class="muted">Nothing has happened yet.</p>
      ) : (
        <ol class="timeline" aria-label="What the run did, in order">
          {steps.map((step, i) => (
            <li key={`${step.kind}-${i}`} class={`step step-${step.kind}`}>
              <StepView step={step} me={me} />
            </li>
          ))}
        </ol>
      )}
    </section>
  )
}
