// Spans (named and attributed as the OpenTelemetry GenAI semantic conventions say) and
// metrics at the seams a run goes through: a model call, a tool call and its wait for a
// person, an MCP server's tool, a memory recall. Each wraps the seam's own function; with
// tracing off only the metrics are recorded.
import { context, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api'
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions'
import {
  ATTR_GEN_AI_DATA_SOURCE_ID,
  ATTR_GEN_AI_INPUT_MESSAGES,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_OUTPUT_MESSAGES,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MAX_TOKENS,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_REQUEST_TEMPERATURE,
  ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
  ATTR_GEN_AI_RETRIEVAL_QUERY_TEXT,
  ATTR_GEN_AI_TOOL_CALL_ARGUMENTS,
  ATTR_GEN_AI_TOOL_CALL_ID,
  ATTR_GEN_AI_TOOL_CALL_RESULT,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_GEN_AI_TOOL_TYPE,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS,
  ATTR_MCP_METHOD_NAME,
  GEN_AI_OPERATION_NAME_VALUE_CHAT,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
  GEN_AI_OPERATION_NAME_VALUE_RETRIEVAL
} from '@opentelemetry/semantic-conventions/incubating'
import { sql } from 'drizzle-orm'
import { rowsOf, type Db } from '../db/client.js'
import { dateOf, dateOrNull } from '../db/rows.js'
import { EngineError } from '../runs/engines/types.js'
import { metrics, toolLabel } from './metrics.js'
import { contentAttribute, contextOf, tracer } from './tracing.js'

/** One model call as its span and metrics see it. */
export interface ModelCallInfo {
  /** the engine: openai or anthropic (an org provider's calls go through the engine of its kind) */
  provider: string
  model: string
  settings: { temperature?: number | undefined; maxOutputTokens?: number | undefined }
  /** what is sent (recorded only when content capture is on) */
  messages: unknown
}

/** What a model call answers, as far as its span and metrics read it. */
export interface ModelCallResult {
  text: string
  usage: { promptTokens: number; completionTokens: number }
  toolCalls: unknown[]
  /** the provider's own word for why it stopped (`stop`, `tool_calls`, `end_turn`, …), when it said */
  finishReason?: string | undefined
}

/** One retry, as model-call.ts reports it. */
export interface RetryInfo {
  attempt: number
  status: number | null
  waitMs: number
}

/** A failed model call's type: its HTTP status when it had one, a timeout, else a failure to get an answer. */
function modelErrorType(err: unknown): string {
  const message = err instanceof Error ? err.message : ''
  if (message.startsWith('upstream_timeout')) return 'timeout'
  const status = /HTTP (\d{3})/.exec(message)?.[1]
  if (status) return status
  if (message.startsWith('upstream_error')) return 'upstream_error'
  return message.split(':')[0]?.trim() || 'error'
}

/**
 * A model call (`chat <model>`), its retries included: each retry an event of the span;
 * latency, tokens, retries and errors counted by provider and model. A call stopped by its
 * run (a cancel, a shutdown) is neither an error nor timed.
 */
export async function observeModelCall<T extends ModelCallResult>(
  info: ModelCallInfo,
  call: (onRetry: (retry: RetryInfo) => void) => Promise<T>
): Promise<T> {
  const m = metrics()
  const model = m?.model(info.model) ?? info.model
  const started = performance.now()
  const t = tracer()
  let span: Span | undefined
  if (t) {
    span = t.startSpan(`${GEN_AI_OPERATION_NAME_VALUE_CHAT} ${info.model}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_CHAT,
        [ATTR_GEN_AI_PROVIDER_NAME]: info.provider,
        [ATTR_GEN_AI_REQUEST_MODEL]: info.model,
        ...(info.settings.temperature !== undefined
          ? { [ATTR_GEN_AI_REQUEST_TEMPERATURE]: info.settings.temperature }
          : {}),
        ...(info.settings.maxOutputTokens !== undefined
          ? { [ATTR_GEN_AI_REQUEST_MAX_TOKENS]: info.settings.maxOutputTokens }
          : {})
      }
    })
    const input = contentAttribute(info.messages)
    if (input !== undefined) span.setAttribute(ATTR_GEN_AI_INPUT_MESSAGES, input)
  }
  const onRetry = (retry: RetryInfo) => {
    m?.modelRetries.inc({ provider: info.provider, model })
    span?.addEvent('gen_ai.retry', {
      'cairn.retry.attempt': retry.attempt,
      ...(retry.status !== null ? { 'http.response.status_code': retry.status } : {}),
      'cairn.retry.wait_ms': retry.waitMs
    })
  }
  const run = () => call(onRetry)
  try {
    const answer = await (span ? context.with(trace.setSpan(context.active(), span), run) : run())
    const finish = answer.finishReason ?? (answer.toolCalls.length > 0 ? 'tool_calls' : 'stop')
    if (m) {
      m.modelCallDuration.observe(
        { provider: info.provider, model, outcome: 'ok' },
        (performance.now() - started) / 1000
      )
      const orgLabels = (type: string) => ({ provider: info.provider, model, type })
      m.modelTokens.inc(orgLabels('input'), answer.usage.promptTokens)
      m.modelTokens.inc(orgLabels('output'), answer.usage.completionTokens)
    }
    if (span) {
      span.setAttributes({
        [ATTR_GEN_AI_USAGE_INPUT_TOKENS]: answer.usage.promptTokens,
        [ATTR_GEN_AI_USAGE_OUTPUT_TOKENS]: answer.usage.completionTokens,
        [ATTR_GEN_AI_RESPONSE_FINISH_REASONS]: [finish]
      })
      const output = contentAttribute([
        {
          role: 'assistant',
          parts: [
            ...(answer.text !== '' ? [{ type: 'text', content: answer.text }] : []),
            ...answer.toolCalls.map((call) => ({ type: 'tool_call', ...(call as object) }))
          ],
          finish_reason: finish
        }
      ])
      if (output !== undefined) span.setAttribute(ATTR_GEN_AI_OUTPUT_MESSAGES, output)
    }
    return answer
  } catch (err) {
    if (err instanceof EngineError) {
      const type = modelErrorType(err)
      if (m) {
        m.modelErrors.inc({ provider: info.provider, model, error_type: type })
        m.modelCallDuration.observe(
          { provider: info.provider, model, outcome: 'error' },
          (performance.now() - started) / 1000
        )
      }
      span?.setAttribute(ATTR_ERROR_TYPE, type)
      span?.setStatus({ code: SpanStatusCode.ERROR, message: err.message })
    } else {
      span?.setAttribute('cairn.stopped', true)
    }
    throw err
  } finally {
    span?.end()
  }
}

/** A tool call of a run as the gateway port takes it (src/runs/ports/tool-gateway.ts). */
export interface ToolCallInfo {
  orgId: string
  runId: string
  callId: string
  name: string
  arguments: string
  approvalId?: string | undefined
}

/**
 * A run's tool call (`execute_tool <name>`), counted by tool and outcome. A call going on
 * after a person decided gets the wait as its own span (`await_approval <name>`), from the
 * ask to the decision, the child of the span that asked (its traceparent is stored with
 * the approval), with who decided.
 */
export async function observeToolCall<T extends { content: string; status: string }>(
  db: Db,
  call: ToolCallInfo,
  execute: () => Promise<T>
): Promise<T> {
  const t = tracer()
  if (!t) {
    const result = await execute()
    countTool(call, result.status)
    return result
  }
  const mcp = call.name.startsWith('mcp__')
  const span = t.startSpan(`${GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL} ${call.name}`, {
    kind: SpanKind.INTERNAL,
    attributes: {
      [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
      [ATTR_GEN_AI_TOOL_NAME]: call.name,
      [ATTR_GEN_AI_TOOL_CALL_ID]: call.callId,
      [ATTR_GEN_AI_TOOL_TYPE]: mcp ? 'extension' : 'function',
      ...(call.approvalId !== undefined ? { 'cairn.approval.id': call.approvalId } : {})
    }
  })
  const args = contentAttribute(call.arguments)
  if (args !== undefined) span.setAttribute(ATTR_GEN_AI_TOOL_CALL_ARGUMENTS, args)
  try {
    const result = await context.with(trace.setSpan(context.active(), span), execute)
    countTool(call, result.status)
    span.setAttribute('cairn.tool.status', result.status)
    if ('approvalId' in result && typeof result.approvalId === 'string')
      span.setAttribute('cairn.approval.id', result.approvalId)
    if (result.status === 'error') span.setStatus({ code: SpanStatusCode.ERROR })
    const content =
      result.status === 'pending' || result.status === 'deferred' ? undefined : contentAttribute(result.content)
    if (content !== undefined) span.setAttribute(ATTR_GEN_AI_TOOL_CALL_RESULT, content)
    if (call.approvalId !== undefined && result.status !== 'pending')
      await recordApprovalWait(db, call, result.status).catch(() => {})
    return result
  } catch (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) })
    throw err
  } finally {
    span.end()
  }
}

function countTool(call: ToolCallInfo, status: string): void {
  const m = metrics()
  // a deferred call ran nothing; it is counted when it runs
  if (!m || status === 'deferred') return
  m.toolCalls.inc(m.withOrg({ tool: toolLabel(call.name), outcome: status }, call.orgId))
}

/** The wait of a decided approval as a span of its own, with its real start and end. */
async function recordApprovalWait(db: Db, call: ToolCallInfo, status: string): Promise<void> {
  const t = tracer()
  if (!t) return
  const [row] = rowsOf<Record<string, unknown>>(
    await db.execute(sql`
      select created_at, decided_at, decided_by, status, traceparent from tool_approvals
      where org_id = ${call.orgId} and run_id = ${call.runId} and id = ${call.approvalId!}`)
  )
  if (!row) return
  const asked = dateOf(row.created_at)
  const decided = dateOrNull(row.decided_at) ?? new Date()
  const stored = row.traceparent as string | null
  const parent = stored ? contextOf(stored) : context.active()
  const wait = t.startSpan(
    `await_approval ${call.name}`,
    {
      kind: SpanKind.INTERNAL,
      startTime: asked,
      attributes: {
        [ATTR_GEN_AI_TOOL_NAME]: call.name,
        [ATTR_GEN_AI_TOOL_CALL_ID]: call.callId,
        'cairn.approval.id': call.approvalId!,
        'cairn.approval.status': String(row.status ?? status),
        ...(typeof row.decided_by === 'string' ? { 'cairn.approval.decided_by': row.decided_by } : {})
      }
    },
    parent
  )
  wait.end(decided)
}

/** An MCP server's tool call (`tools/call <tool>`), its traceparent sent to the server (src/mcp/client.ts). */
export async function observeMcpCall<T extends { ok: boolean }>(name: string, call: () => Promise<T>): Promise<T> {
  const t = tracer()
  if (!t) return call()
  const span = t.startSpan(`tools/call ${name}`, {
    kind: SpanKind.CLIENT,
    attributes: {
      [ATTR_MCP_METHOD_NAME]: 'tools/call',
      [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
      [ATTR_GEN_AI_TOOL_NAME]: name
    }
  })
  try {
    const result = await context.with(trace.setSpan(context.active(), span), call)
    if (!result.ok) span.setStatus({ code: SpanStatusCode.ERROR, message: 'the server answered an error' })
    return result
  } catch (err) {
    span.setAttribute(ATTR_ERROR_TYPE, err instanceof Error ? err.name : 'error')
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) })
    throw err
  } finally {
    span.end()
  }
}

/** A memory recall of a run (`retrieval memory`): how many items it found, and the query when content is captured. */
export async function observeRecall<T extends { items: unknown[]; query: string }>(
  kind: string,
  recall: () => Promise<T>
): Promise<T> {
  const t = tracer()
  if (!t) return recall()
  const span = t.startSpan(`${GEN_AI_OPERATION_NAME_VALUE_RETRIEVAL} memory`, {
    kind: SpanKind.INTERNAL,
    attributes: {
      [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_RETRIEVAL,
      [ATTR_GEN_AI_DATA_SOURCE_ID]: 'memory',
      'cairn.memory.recall.kind': kind
    }
  })
  try {
    const result = await context.with(trace.setSpan(context.active(), span), recall)
    span.setAttribute('cairn.memory.recall.count', result.items.length)
    const query = contentAttribute(result.query)
    if (query !== undefined) span.setAttribute(ATTR_GEN_AI_RETRIEVAL_QUERY_TEXT, query)
    return result
  } catch (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) })
    throw err
  } finally {
    span.end()
  }
}
