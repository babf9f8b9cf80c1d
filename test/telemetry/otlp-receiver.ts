import { createServer } from 'node:http'
import { once } from 'node:events'
import type { Teardown } from '../helper.js'

/** One OTLP attribute value as the JSON encoding writes it (ids in hex, 64-bit integers as strings). */
interface AnyValue {
  stringValue?: string
  boolValue?: boolean
  intValue?: string | number
  doubleValue?: number
  arrayValue?: { values?: AnyValue[] }
}

interface KeyValue {
  key: string
  value: AnyValue
}

/** `ExportTraceServiceRequest` in OTLP/HTTP's JSON encoding (the fields these tests read). */
interface ExportTraceServiceRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: KeyValue[] }
    scopeSpans?: Array<{
      spans?: Array<{
        traceId: string
        spanId: string
        parentSpanId?: string
        name: string
        kind: number
        startTimeUnixNano: string | number
        endTimeUnixNano: string | number
        attributes?: KeyValue[]
        events?: Array<{ name: string; attributes?: KeyValue[] }>
        status?: { code?: number; message?: string }
      }>
    }>
  }>
}

export type Value = string | boolean | number | Value[]

/** A received span, its attributes read into plain values. */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string | null
  name: string
  kind: number
  startMs: number
  endMs: number
  attributes: Record<string, Value>
  events: Array<{ name: string; attributes: Record<string, Value> }>
  status: number
  resource: Record<string, Value>
}

function valueOf(v: AnyValue): Value {
  if (v.stringValue !== undefined) return v.stringValue
  if (v.boolValue !== undefined) return v.boolValue
  if (v.intValue !== undefined) return Number(v.intValue)
  if (v.doubleValue !== undefined) return v.doubleValue
  return (v.arrayValue?.values ?? []).map(valueOf)
}

const attributesOf = (list: KeyValue[] | undefined) =>
  Object.fromEntries((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]))

export interface OtlpReceiver {
  /** the base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it (spans are posted to `<it>/v1/traces`) */
  endpoint: string
  spans: ReceivedSpan[]
  /** the content types of the exports received */
  contentTypes: string[]
}

/**
 * A local OTLP/HTTP collector: accepts what the exporter posts to /v1/traces (JSON, as
 * @opentelemetry/exporter-trace-otlp-http sends it), keeps every span, and answers as a
 * collector does (200, an empty ExportTraceServiceResponse).
 */
export async function startOtlpReceiver(t: Teardown): Promise<OtlpReceiver> {
  const received: OtlpReceiver = { endpoint: '', spans: [], contentTypes: [] }
  const server = createServer(async (req, res) => {
    let raw = ''
    for await (const chunk of req) raw += chunk
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      res.writeHead(404).end()
      return
    }
    received.contentTypes.push(String(req.headers['content-type']))
    const body = JSON.parse(raw) as ExportTraceServiceRequest
    for (const rs of body.resourceSpans ?? []) {
      const resource = attributesOf(rs.resource?.attributes)
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          received.spans.push({
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId ? s.parentSpanId : null,
            name: s.name,
            kind: s.kind,
            startMs: Number(BigInt(s.startTimeUnixNano) / 1_000_000n),
            endMs: Number(BigInt(s.endTimeUnixNano) / 1_000_000n),
            attributes: attributesOf(s.attributes),
            events: (s.events ?? []).map((e) => ({ name: e.name, attributes: attributesOf(e.attributes) })),
            status: s.status?.code ?? 0,
            resource
          })
        }
      }
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  received.endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  return received
}
