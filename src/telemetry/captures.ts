import { context, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api'
import { sql } from 'drizzle-orm'
import { rowsOf, type Db } from '../db/client.js'
import { contextOf, tracer } from './tracing.js'

/**
 * One round of the memory capture outbox, each capture a span (`memory capture`) in the
 * trace of the run it keeps facts of (from the run's stored traceparent), ended with the
 * state the round left it in. Off, or with nothing to trace, the round runs as it is.
 */
export async function observeCaptures<T>(
  db: Db,
  rows: ReadonlyArray<{ id: string; run_id: string }>,
  deliver: () => Promise<T>
): Promise<T> {
  const t = tracer()
  if (!t || rows.length === 0) return deliver()
  let parents: Map<string, string | null>
  try {
    parents = new Map(
      rowsOf<{ id: string; traceparent: string | null }>(
        await db.execute(
          sql`select id, traceparent from runs where id in (${sql.join(
            rows.map((r) => sql`${r.run_id}`),
            sql`, `
          )})`
        )
      ).map((r) => [r.id, r.traceparent])
    )
  } catch {
    return deliver()
  }
  const spans = new Map<string, Span>()
  for (const row of rows) {
    const traceparent = parents.get(row.run_id)
    if (!traceparent) continue
    spans.set(
      row.id,
      t.startSpan(
        'memory capture',
        { kind: SpanKind.INTERNAL, attributes: { 'cairn.run.id': row.run_id, 'cairn.memory.capture.id': row.id } },
        contextOf(traceparent)
      )
    )
  }
  try {
    // the delivery itself runs outside the runs' traces: one round serves many runs
    return await context.with(trace.deleteSpan(context.active()), deliver)
  } finally {
    if (spans.size > 0) {
      const states = await db
        .execute(
          sql`select id, state, last_error from memory_captures where id in (${sql.join(
            [...spans.keys()].map((id) => sql`${id}`),
            sql`, `
          )})`
        )
        .then((result) => rowsOf<{ id: string; state: string; last_error: string | null }>(result))
        .catch(() => [])
      const byId = new Map(states.map((s) => [s.id, s]))
      for (const [id, span] of spans) {
        const state = byId.get(id)
        span.setAttribute('cairn.memory.capture.state', state?.state ?? 'unknown')
        if (state && state.state !== 'delivered')
          span.setStatus({ code: SpanStatusCode.ERROR, message: state.last_error ?? state.state })
        span.end()
      }
    }
  }
}
