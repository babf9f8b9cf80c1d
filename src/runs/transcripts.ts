// A run's transcript: its model conversation as sent and received, kept with the run and
// replayed to the thread's later runs. Stored provider-neutral (run_messages); the engines'
// shared wire shape (WireMessage) is turned into it when written and back when replayed.
import { and, asc, eq, sql, type SQL } from 'drizzle-orm'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { jsonOf } from '../db/rows.js'
import type { Redactor } from '../secrets/redact.js'
import type { WireMessage } from './engines/types.js'
import { runMessages, type TranscriptToolCall } from './tables.js'

/** One message of a transcript, as stored and as `GET /api/runs/:id/messages` shows it. */
export interface TranscriptMessage {
  role: 'user' | 'assistant' | 'tool'
  content: string
  toolCalls?: TranscriptToolCall[] | undefined
  toolCallId?: string | undefined
  name?: string | undefined
}

/** Tool results longer than this many characters are cut to it when a thread's history does not fit. */
export const SHORTENED_RESULT_CHARS = 1000

/**
 * The run's own part of a model conversation: from its user message on (the system messages
 * and the thread's earlier turns come before it; after it come only assistant messages and
 * tool results, so it is the last user message).
 */
export function ownMessages(wire: readonly WireMessage[]): WireMessage[] {
  for (let i = wire.length - 1; i >= 0; i--) if (wire[i]!.role === 'user') return wire.slice(i)
  return []
}

/**
 * The thread's earlier turns inside a stored model conversation: what came before the run's
 * own user message, without the system messages. A run going on after it waited (or after it
 * was handed back) carries them in its stored state rather than reading them again.
 */
export function earlierMessages(wire: readonly WireMessage[]): WireMessage[] {
  for (let i = wire.length - 1; i >= 0; i--)
    if (wire[i]!.role === 'user') return wire.slice(0, i).filter((m) => m.role !== 'system')
  return []
}

/** Wire messages as transcript messages, secrets redacted; a tool result names its tool. */
export function toTranscript(wire: readonly WireMessage[], redact: Redactor): TranscriptMessage[] {
  const names = new Map<string, string>()
  const out: TranscriptMessage[] = []
  for (const m of wire) {
    if (m.role === 'system') continue
    if (m.role === 'tool') {
      out.push({
        role: 'tool',
        content: redact.text(m.content),
        toolCallId: m.tool_call_id,
        ...(names.has(m.tool_call_id) ? { name: names.get(m.tool_call_id) } : {})
      })
    } else if (m.role === 'assistant' && 'tool_calls' in m) {
      for (const c of m.tool_calls) names.set(c.id, c.function.name)
      out.push({
        role: 'assistant',
        content: redact.text(m.content ?? ''),
        toolCalls: m.tool_calls.map((c) => ({
          id: c.id,
          name: c.function.name,
          arguments: redact.text(c.function.arguments)
        }))
      })
    } else {
      out.push({ role: m.role, content: redact.text(m.content) })
    }
  }
  return out
}

/**
 * Stores a run's transcript from message `from` on (earlier ones are stored already); a
 * message already stored is left as it is, so writing the same round twice (a run handed
 * back and taken again) changes nothing.
 */
export async function appendTranscript(
  db: Db | Tx,
  run: { id: string; orgId: string; rootRunId: string },
  messages: readonly TranscriptMessage[],
  from = 0
): Promise<void> {
  const rows = messages.slice(from).map((m, i) => ({
    runId: run.id,
    seq: from + i,
    orgId: run.orgId,
    rootRunId: run.rootRunId,
    role: m.role,
    content: m.content,
    toolCalls: m.toolCalls ?? null,
    toolCallId: m.toolCallId ?? null,
    name: m.name ?? null
  }))
  if (rows.length === 0) return
  await db.insert(runMessages).values(rows).onConflictDoNothing()
}

/**
 * Stores a run's transcript size as a later run of its thread is sent it (UTF-8 bytes: whole,
 * and with tool results longer than SHORTENED_RESULT_CHARS shortened, their marker counted as
 * 64), from its stored messages; null for a run with none. Written when the run succeeds, so a
 * thread's next run measures its history from the runs alone.
 */
export async function storeContextSizes(db: Db | Tx, runId: string): Promise<void> {
  await db.execute(sql`
    update runs set (context_bytes, context_short_bytes) = (${contextSizes(sql`select role, content, tool_calls from run_messages where run_id = ${runId}`)})
    where id = ${runId}`)
}

/**
 * The statement part that measures messages (`rows`: a select of role, content and
 * tool_calls) as a later run of the thread is sent them: whole, and with long tool results
 * shortened. One rule for the run that ends in a transaction and the one that ends alone.
 */
export function contextSizes(rows: SQL): SQL {
  const short = sql.raw(String(SHORTENED_RESULT_CHARS))
  return sql`
      select sum(octet_length(m.content) + coalesce(octet_length(m.tool_calls::text), 0)),
             sum(case when m.role = 'tool' and octet_length(m.content) > ${short}
                   then octet_length(left(m.content, ${short})) + 64 else octet_length(m.content) end
                 + coalesce(octet_length(m.tool_calls::text), 0))
      from (${rows}) m`
}

type MessageRow = typeof runMessages.$inferSelect

const fromRow = (r: Pick<MessageRow, 'role' | 'content' | 'toolCalls' | 'toolCallId' | 'name'>): TranscriptMessage => ({
  role: r.role,
  content: r.content,
  ...(r.toolCalls ? { toolCalls: r.toolCalls } : {}),
  ...(r.toolCallId !== null ? { toolCallId: r.toolCallId } : {}),
  ...(r.name !== null ? { name: r.name } : {})
})

/** A run's transcript, in order (empty when it has none yet). */
export async function transcriptOf(db: Db, orgId: string, runId: string): Promise<TranscriptMessage[]> {
  const rows = await db
    .select()
    .from(runMessages)
    .where(and(eq(runMessages.orgId, orgId), eq(runMessages.runId, runId)))
    .orderBy(asc(runMessages.seq))
  return rows.map(fromRow)
}

/** The transcripts of a thread's runs, each in order, in one query (built as json: text, never queried). */
export async function threadTranscripts(
  db: Db,
  orgId: string,
  rootRunId: string
): Promise<Map<string, TranscriptMessage[]>> {
  const rows = rowsOf<{ run_id: string; items: unknown }>(
    await db.execute(sql`
      select run_id, json_agg(json_strip_nulls(json_build_object('role', role, 'content', content,
               'toolCalls', tool_calls, 'toolCallId', tool_call_id, 'name', name)) order by seq) as items
      from run_messages where org_id = ${orgId} and root_run_id = ${rootRunId} group by run_id`)
  )
  return new Map(rows.map((r) => [r.run_id, jsonOf<TranscriptMessage[]>(r.items) ?? []]))
}

/**
 * An assistant answer with no text (none, or only white space) is never sent to a model again: the Messages API
 * refuses an empty assistant message and some OpenAI-compatible servers do too; the thread goes on without it.
 */
export const emptyAnswerText = (content: string | null | undefined): boolean => (content ?? '').trim() === ''

/**
 * Earlier turns as the model is sent them again: each tool call with its result right after
 * it (a call without a result, or a result without its call, is left out), no assistant
 * message that is empty, and tool call ids unique over the whole conversation (a provider
 * refuses two calls of one id).
 */
export function replayWire(turns: ReadonlyArray<readonly TranscriptMessage[]>): WireMessage[] {
  const wire: WireMessage[] = []
  const used = new Set<string>()
  turns.forEach((turn, t) => {
    for (let i = 0; i < turn.length; i++) {
      const m = turn[i]!
      if (m.role === 'user') {
        wire.push({ role: 'user', content: m.content })
        continue
      }
      if (m.role === 'tool') continue // only as the answer of the call before it
      const calls = m.toolCalls ?? []
      // the results that follow this message, by call id
      const results = new Map<string, TranscriptMessage>()
      let j = i + 1
      for (; j < turn.length && turn[j]!.role === 'tool'; j++) results.set(turn[j]!.toolCallId ?? '', turn[j]!)
      const answered = calls.filter((c) => results.has(c.id))
      if (answered.length === 0) {
        if (!emptyAnswerText(m.content)) wire.push({ role: 'assistant', content: m.content })
        i = j - 1
        continue
      }
      const ids = new Map<string, string>()
      for (const c of answered) {
        let id = c.id
        if (used.has(id)) id = `${c.id}_t${t}`.replace(/[^a-zA-Z0-9_-]/g, '_')
        for (let n = 2; used.has(id); n++) id = `${c.id}_t${t}_${n}`.replace(/[^a-zA-Z0-9_-]/g, '_')
        used.add(id)
        ids.set(c.id, id)
      }
      wire.push({
        role: 'assistant',
        content: emptyAnswerText(m.content) ? null : m.content,
        tool_calls: answered.map((c) => ({
          id: ids.get(c.id)!,
          type: 'function' as const,
          function: { name: c.name, arguments: c.arguments }
        }))
      })
      for (const c of answered)
        wire.push({ role: 'tool', tool_call_id: ids.get(c.id)!, content: results.get(c.id)!.content })
      i = j - 1
    }
  })
  return wire
}
