// Prometheus metrics through prom-client. The counters and histograms are the process's
// (a process is one scrape target, whatever number of apps a test builds in it); the gauges
// read from the database belong to each app, which answers GET /metrics with both.
import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client'
import { isToolName } from '../runtime/tools.js'

/** Values a label may take beyond which new ones are counted as `other` (org providers name their own models). */
const MAX_VALUES_PER_LABEL = 64

/** A label whose values come from data (model names): the first MAX_VALUES_PER_LABEL kept, the rest `other`. */
class BoundedLabel {
  private readonly seen = new Set<string>()

  of(value: string): string {
    if (this.seen.has(value)) return value
    if (this.seen.size >= MAX_VALUES_PER_LABEL) return 'other'
    this.seen.add(value)
    return value
  }
}

/** Seconds: from a fast claim to a model call that streams for minutes. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600]
const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

type WithOrg<L extends string> = L | 'org'

/** The instruments the code paths record into; rebuilt when METRICS_PER_ORG changes (tests build apps of both). */
export class Instruments {
  readonly registry = new Registry()
  readonly perOrg: boolean
  private readonly models = new BoundedLabel()

  readonly runsStarted: Counter<WithOrg<'origin'>>
  readonly runsEnded: Counter<WithOrg<'origin' | 'status'>>
  readonly queueWait: Histogram<'origin'>
  readonly runDuration: Histogram<'origin' | 'status'>
  readonly modelCallDuration: Histogram<'provider' | 'model' | 'outcome'>
  readonly modelTokens: Counter<'provider' | 'model' | 'type'>
  readonly modelErrors: Counter<'provider' | 'model' | 'error_type'>
  readonly modelRetries: Counter<'provider' | 'model'>
  readonly toolCalls: Counter<WithOrg<'tool' | 'outcome'>>
  readonly httpDuration: Histogram<'method' | 'route' | 'status_code'>

  constructor(perOrg: boolean) {
    this.perOrg = perOrg
    const registers = [this.registry]
    const org = (names: string[]) => (perOrg ? [...names, 'org'] : names)
    this.runsStarted = new Counter({
      name: 'cairn_runs_started_total',
      help: 'Runs this instance started executing (a run going on after an approval is not counted again)',
      labelNames: org(['origin']) as Array<WithOrg<'origin'>>,
      registers
    })
    this.runsEnded = new Counter({
      name: 'cairn_runs_ended_total',
      help: 'Runs that ended (succeeded, failed, cancelled) on this instance, by the worker or by a cancel or sweep',
      labelNames: org(['origin', 'status']) as Array<WithOrg<'origin' | 'status'>>,
      registers
    })
    this.queueWait = new Histogram({
      name: 'cairn_run_queue_wait_seconds',
      help: "From a run's creation to its start by a worker",
      labelNames: ['origin'],
      buckets: DURATION_BUCKETS,
      registers
    })
    this.runDuration = new Histogram({
      name: 'cairn_run_duration_seconds',
      help: "From a run's start to its end (waits for approvals included)",
      labelNames: ['origin', 'status'],
      buckets: DURATION_BUCKETS,
      registers
    })
    this.modelCallDuration = new Histogram({
      name: 'cairn_model_call_duration_seconds',
      help: 'One model call, its retries included, by provider (engine) and model',
      labelNames: ['provider', 'model', 'outcome'],
      buckets: DURATION_BUCKETS,
      registers
    })
    this.modelTokens = new Counter({
      name: 'cairn_model_tokens_total',
      help: 'Tokens of model calls, by provider, model and type (input, output)',
      labelNames: ['provider', 'model', 'type'],
      registers
    })
    this.modelErrors = new Counter({
      name: 'cairn_model_call_errors_total',
      help: 'Model calls that failed after their retries, by provider, model and error type',
      labelNames: ['provider', 'model', 'error_type'],
      registers
    })
    this.modelRetries = new Counter({
      name: 'cairn_model_call_retries_total',
      help: 'Model calls tried again (429, 5xx, no connection) before their first token',
      labelNames: ['provider', 'model'],
      registers
    })
    this.toolCalls = new Counter({
      name: 'cairn_tool_calls_total',
      help: 'Tool calls of runs by tool (MCP tools as mcp) and outcome (ok, error, denied, expired, cancelled, pending)',
      labelNames: org(['tool', 'outcome']) as Array<WithOrg<'tool' | 'outcome'>>,
      registers
    })
    this.httpDuration = new Histogram({
      name: 'cairn_http_request_duration_seconds',
      help: 'HTTP requests by method, route (its pattern) and status code',
      labelNames: ['method', 'route', 'status_code'],
      buckets: HTTP_BUCKETS,
      registers
    })
  }

  /** A model name as a label value (bounded). */
  model(model: string | null): string {
    return this.models.of(model ?? 'default')
  }

  /** Labels, with the org id only when METRICS_PER_ORG is on. */
  withOrg<T extends Record<string, string>>(labels: T, orgId: string): T & { org?: string } {
    return this.perOrg ? { ...labels, org: orgId } : labels
  }
}

/** A tool's name as a label value: the built-in tools by name, every MCP tool as `mcp` (org data). */
export function toolLabel(name: string): string {
  return isToolName(name) ? name : name.startsWith('mcp__') ? 'mcp' : 'unknown'
}

let instruments: Instruments | null = null
let defaults: Registry | null = null

/** The process's instruments for this METRICS_PER_ORG (made, or made again, by each app that starts). */
export function useInstruments(perOrg: boolean): Instruments {
  if (!instruments || instruments.perOrg !== perOrg) instruments = new Instruments(perOrg)
  return instruments
}

/** What the code paths record into; null before any app started (a unit test of one module). */
export function metrics(): Instruments | null {
  return instruments
}

/**
 * The process's own metrics (event loop lag and its percentiles, CPU, memory, handles,
 * garbage collection), sampled by prom-client once per process.
 */
export function processRegistry(): Registry {
  if (!defaults) {
    defaults = new Registry()
    collectDefaultMetrics({ register: defaults, eventLoopMonitoringPrecision: 10 })
  }
  return defaults
}
