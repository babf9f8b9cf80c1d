// A run's execution as telemetry sees it: the `invoke_agent` span (the child of the span
// that started the run, from its stored traceparent, on whichever instance executes it),
// and the run counters and histograms.
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api'
import {
  ATTR_GEN_AI_CONVERSATION_ID,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MODEL,
  GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT
} from '@opentelemetry/semantic-conventions/incubating'
import { NO_SECRETS } from '../secrets/redact.js'
import { metrics } from './metrics.js'
import { contextOf, tracer, withRunScope } from './tracing.js'

/** What of a claimed run its telemetry reads. */
export interface ObservedRun {
  id: string
  orgId: string
  rootRunId: string
  origin: string
  engine: string
  model: string | null
  createdAt: Date
  startedAt: Date | null
  /** set when the run goes on from where it waited (an approval) or was handed back */
  suspended: unknown
  traceparent: string | null
}

/** How an execution of a run ended: its end, or why it left the worker without one. */
export type ExecutionEnd = 'succeeded' | 'failed' | 'cancelled' | 'requires_action' | 'queued' | 'lost'

export interface RunObservation {
  /** runs the execution inside the run's span (its model calls, tools and recalls are its children) */
  within<T>(work: () => Promise<T>): Promise<T>
  /** the execution is over: the span ends with the status, the run counted once it has ended */
  end(status: ExecutionEnd | undefined): void
}

const TERMINAL = new Set<string>(['succeeded', 'failed', 'cancelled'])

/** Counts a run that ended outside its worker (a cancel, an interrupted thread, a lost worker swept). */
export function countRunEnded(run: { orgId: string; origin: string }, status: string): void {
  const m = metrics()
  m?.runsEnded.inc(m.withOrg({ origin: run.origin, status }, run.orgId))
}

/** Starts observing one execution of a run a worker claimed. */
export function observeRun(run: ObservedRun, workerId: string): RunObservation {
  const m = metrics()
  const fresh = run.suspended === null || run.suspended === undefined
  if (m && fresh) {
    m.runsStarted.inc(m.withOrg({ origin: run.origin }, run.orgId))
    if (run.startedAt)
      m.queueWait.observe({ origin: run.origin }, seconds(run.startedAt.getTime() - run.createdAt.getTime()))
  }
  const count = (status: ExecutionEnd | undefined) => {
    if (!m || status === undefined || !TERMINAL.has(status)) return
    m.runsEnded.inc(m.withOrg({ origin: run.origin, status }, run.orgId))
    if (run.startedAt)
      m.runDuration.observe({ origin: run.origin, status }, seconds(Date.now() - run.startedAt.getTime()))
  }
  const t = tracer()
  if (!t) return { within: (work) => work(), end: count }

  const parent = contextOf(run.traceparent)
  const span = t.startSpan(
    GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT,
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT,
        [ATTR_GEN_AI_PROVIDER_NAME]: run.engine,
        ...(run.model !== null ? { [ATTR_GEN_AI_REQUEST_MODEL]: run.model } : {}),
        [ATTR_GEN_AI_CONVERSATION_ID]: run.rootRunId,
        'cairn.run.id': run.id,
        'cairn.org.id': run.orgId,
        'cairn.run.origin': run.origin,
        'cairn.run.resumed': !fresh,
        'cairn.worker.id': workerId
      }
    },
    parent
  )
  const ctx = withRunScope(trace.setSpan(parent, span), { redact: NO_SECRETS })
  return {
    within: (work) => context.with(ctx, work),
    end(status) {
      count(status)
      span.setAttribute('cairn.run.status', status ?? 'lost')
      if (status === 'failed' || status === 'lost' || status === undefined)
        span.setStatus({ code: SpanStatusCode.ERROR })
      span.end()
    }
  }
}

const seconds = (ms: number) => Math.max(0, ms) / 1000
