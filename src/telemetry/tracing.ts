// OpenTelemetry tracing, on only when an OTLP endpoint is configured: then one tracer
// provider per process (every app built in it shares it), the AsyncLocalStorage context
// manager and the W3C trace-context propagator are registered globally. Off, nothing is
// registered and every helper here returns at its first line, so the code paths that call
// them cost one boolean test (docs/observability.md).
import {
  context,
  createContextKey,
  isSpanContextValid,
  propagation,
  ROOT_CONTEXT,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type Tracer
} from '@opentelemetry/api'
import type { TracerProvider } from '@opentelemetry/sdk-trace'
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions'
import { randomUUID } from 'node:crypto'
import type { Config } from '../config.js'
import { NO_SECRETS, type Redactor } from '../secrets/redact.js'

type TracingConfig = Pick<
  Config,
  | 'OTEL_EXPORTER_OTLP_ENDPOINT'
  | 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'
  | 'OTEL_EXPORTER_OTLP_HEADERS'
  | 'OTEL_SERVICE_NAME'
  | 'OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT'
>

/** Where spans are posted, as the OTLP exporter variables say; null: tracing is off. */
export function tracesUrl(config: TracingConfig): string | null {
  if (config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  if (config.OTEL_EXPORTER_OTLP_ENDPOINT) return `${config.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces`
  return null
}

/** `OTEL_EXPORTER_OTLP_HEADERS` as the OpenTelemetry specification writes it: `k=v,k2=v2`, values percent-encoded. */
export function exportHeaders(value: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const pair of (value ?? '').split(',')) {
    const at = pair.indexOf('=')
    if (at <= 0) continue
    const key = pair.slice(0, at).trim()
    let text = pair.slice(at + 1).trim()
    try {
      text = decodeURIComponent(text)
    } catch {
      // kept as written: a value that is not percent-encoded
    }
    if (key !== '') headers[key] = text
  }
  return headers
}

interface Active {
  provider: TracerProvider
  tracer: Tracer
  url: string
  captureContent: boolean
  users: number
}

let active: Active | null = null

/** This process's instance id on its spans (`service.instance.id`). */
export const SERVICE_INSTANCE_ID = randomUUID()

export interface Tracing {
  /** exports the spans ended so far (tests, a clean stop) */
  flush(): Promise<void>
  /** the app is closing: the last one to close exports what is left and unregisters everything */
  stop(): Promise<void>
}

/** Apps of this process waiting for the provider the first one is making. */
let starting: Promise<Active> | null = null

/**
 * The process's tracer provider, registered globally. The SDK, the exporter and the context
 * manager are loaded here, when tracing is on: off, the process never loads them (hundreds of
 * modules every start and every test process would pay for nothing).
 */
async function registerProvider(config: TracingConfig, url: string): Promise<Active> {
  const [{ AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, { OTLPTraceExporter }, resources, sdk] =
    await Promise.all([
      import('@opentelemetry/context-async-hooks'),
      import('@opentelemetry/core'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-trace')
    ])
  const exporter = new OTLPTraceExporter({ url, headers: exportHeaders(config.OTEL_EXPORTER_OTLP_HEADERS) })
  const provider = new sdk.TracerProvider({
    resource: resources.resourceFromAttributes({
      [ATTR_SERVICE_NAME]: config.OTEL_SERVICE_NAME,
      [ATTR_SERVICE_INSTANCE_ID]: SERVICE_INSTANCE_ID
    }),
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter })]
  })
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  trace.setGlobalTracerProvider(provider)
  return {
    provider,
    tracer: provider.getTracer('cairn'),
    url,
    captureContent: config.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
    users: 0
  }
}

/**
 * Starts tracing for an app when its config names an endpoint (null otherwise). The first
 * app of the process registers the provider; later ones share it (their endpoint is the
 * first one's); the last to stop shuts it down.
 */
export async function startTracing(config: TracingConfig): Promise<Tracing | null> {
  const url = tracesUrl(config)
  if (url === null) return null
  if (!active) {
    // two apps starting at once share the one provider the first one makes
    starting ??= registerProvider(config, url).finally(() => {
      starting = null
    })
    active = await starting
  }
  const mine = active
  mine.users++
  let stopped = false
  return {
    flush: () => mine.provider.forceFlush(),
    async stop() {
      if (stopped) return
      stopped = true
      if (--mine.users > 0) return
      if (active === mine) active = null
      await mine.provider.shutdown().catch(() => {})
      trace.disable()
      propagation.disable()
      context.disable()
    }
  }
}

/** The tracer, or null when tracing is off (every span helper's first test). */
export function tracer(): Tracer | null {
  return active?.tracer ?? null
}

/** Whether prompts, answers, tool arguments and results are recorded on spans. */
export function capturingContent(): boolean {
  return active?.captureContent === true
}

/**
 * The `traceparent` of the active span (stored with a run it starts); undefined when there is
 * none. Written from the span's ids as W3C Trace Context spells it (what the propagator's
 * inject writes, without its carrier and trace state: each dispatch asks).
 */
export function currentTraceparent(): string | undefined {
  if (!active) return undefined
  const ids = trace.getSpanContext(context.active())
  if (!ids || !isSpanContextValid(ids)) return undefined
  return `00-${ids.traceId}-${ids.spanId}-0${(ids.traceFlags & TraceFlags.SAMPLED).toString(16)}`
}

/** Headers that carry the active span to a server we call (a model provider, an MCP server); none when off. */
export function traceHeaders(): Record<string, string> {
  if (!active) return {}
  const carrier: Record<string, string> = {}
  propagation.inject(context.active(), carrier)
  return carrier
}

/** The context a stored `traceparent` continues (the root context when there is none or it is unreadable). */
export function contextOf(traceparent: string | null | undefined): Context {
  if (!traceparent) return ROOT_CONTEXT
  return propagation.extract(ROOT_CONTEXT, { traceparent })
}

/** What a run's spans share: its redactor (the run's secret values), set once the run opened its secrets. */
export interface RunScope {
  redact: Redactor
}

const RUN_SCOPE = createContextKey('cairn.run')

export function withRunScope(ctx: Context, scope: RunScope): Context {
  return ctx.setValue(RUN_SCOPE, scope)
}

/** The redactor of the run the active context belongs to (none outside a run). */
export function activeRedactor(): Redactor {
  if (!active) return NO_SECRETS
  return (context.active().getValue(RUN_SCOPE) as RunScope | undefined)?.redact ?? NO_SECRETS
}

/** The run's secret values are known: what its spans record from now on is redacted with them. */
export function redactSpansWith(redact: Redactor): void {
  if (!active) return
  const scope = context.active().getValue(RUN_SCOPE) as RunScope | undefined
  if (scope) scope.redact = redact
}

/** Content for a span attribute when capturing is on: redacted, and cut to a size a collector takes. */
export function contentAttribute(value: unknown): string | undefined {
  if (!capturingContent()) return undefined
  const redacted = activeRedactor().deep(value)
  const text = typeof redacted === 'string' ? redacted : JSON.stringify(redacted)
  return text.length > CONTENT_MAX_CHARS ? `${text.slice(0, CONTENT_MAX_CHARS)}…` : text
}

/** the longest content attribute: collectors refuse (or drop) very large spans */
const CONTENT_MAX_CHARS = 16_384

/** The trace and span ids of the active span, for a log line; null when there is none. */
export function activeIds(): { trace_id: string; span_id: string } | null {
  if (!active) return null
  const span: Span | undefined = trace.getSpan(context.active())
  const ids = span?.spanContext()
  return ids && ids.traceId !== '00000000000000000000000000000000'
    ? { trace_id: ids.traceId, span_id: ids.spanId }
    : null
}
