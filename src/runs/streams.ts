import type { FastifyInstance } from 'fastify'
import type { BusEvent } from '../../plugins/event-bus.js'
import { sseFrame, type SseStream } from '../../plugins/sse.js'
import { isChange, listEventsAfter, loadEventData, TERMINAL_EVENTS } from './events.js'

const HISTORY_BATCH = 1000

type Framed = BusEvent & { eventFrame?: string; changeFrame?: string }

/** `event: <type>` with the stored event; built once per event and shared by every stream. */
export function eventFrame(event: Framed): string {
  return (event.eventFrame ??= sseFrame(
    event.type,
    JSON.stringify({
      id: event.id,
      runId: event.runId,
      rootRunId: event.rootRunId,
      type: event.type,
      createdAt: event.createdAt,
      data: event.data ?? {}
    }),
    event.id
  ))
}

/** `event: change` with identifiers only (the org change stream). */
export function changeFrame(event: Framed): string {
  return (event.changeFrame ??= sseFrame(
    'change',
    JSON.stringify({ kind: 'run', id: event.runId, rootRunId: event.rootRunId }),
    event.id
  ))
}

export interface PipeOptions {
  orgId: string
  stream: SseStream
  /** which live events belong to this stream */
  match(event: BusEvent): boolean
  /** what the history query selects */
  history: { runId?: string; rootRunId?: string; changesOnly?: boolean }
  /** replay from the beginning when the client sent no Last-Event-ID */
  replayAll: boolean
  frame(event: BusEvent): string
  /** after an event was written: true ends the stream */
  after?(event: BusEvent): boolean
  /** after the replay caught up with the live feed */
  caughtUp?(): Promise<void> | void
}

/**
 * Replay then live, with nothing lost and nothing twice: subscribe first and hold live
 * events, replay stored events after the cursor, then release the held ones that are
 * newer than the last id written. Ids commit in order within an org, so "newer than the
 * last written" is exactly "not yet seen".
 */
export async function pipeEvents(app: FastifyInstance, o: PipeOptions): Promise<void> {
  const { stream } = o
  let lastSent = o.stream.lastEventId ?? (o.replayAll ? 0 : -1)
  let held: BusEvent[] | null = []
  let chain: Promise<void> = Promise.resolve()
  let ended = false

  const writeNow = (event: BusEvent) => {
    if (ended || stream.closed || event.id <= lastSent) return
    lastSent = event.id
    stream.write(o.frame(event))
    if (o.after?.(event)) {
      ended = true
      stream.close()
    }
  }
  const write = async (event: BusEvent) => {
    if (ended || stream.closed || event.id <= lastSent) return
    if (event.big && event.data === null) event.data = await loadEventData(app.db, event.orgId, event.id)
    writeNow(event)
  }
  let busy = 0
  const live = (event: BusEvent) => {
    if (!o.match(event)) return
    if (held) {
      held.push(event)
      return
    }
    // the fan-out hot path: nothing queued ahead and nothing to load, so write at once
    // (no promise per stream per event); otherwise keep arrival order through the chain
    if (busy === 0 && !event.big) {
      writeNow(event)
      return
    }
    busy++
    chain = chain
      .then(() => write(event))
      .catch(() => stream.close())
      .finally(() => busy--)
  }

  const catchUp = async () => {
    if (lastSent >= 0) {
      for (;;) {
        const batch = await listEventsAfter(app.db, {
          orgId: o.orgId,
          afterId: lastSent,
          limit: HISTORY_BATCH,
          ...o.history
        })
        for (const event of batch) await write(event)
        if (batch.length < HISTORY_BATCH || ended || stream.closed) break
      }
    }
    const pending = held ?? []
    held = null
    for (const event of pending) await write(event)
    if (!ended) await o.caughtUp?.()
  }

  const unsubscribe = app.eventBus.subscribe(o.orgId, live)
  // after a LISTEN reconnect notifications may be missing: hold live events and re-read
  const unresync = app.eventBus.onResync(() => {
    if (held || stream.closed) return
    held = []
    busy++
    chain = chain
      .then(catchUp)
      .catch(() => stream.close())
      .finally(() => busy--)
  })
  stream.onClose(() => {
    unsubscribe()
    unresync()
  })
  chain = chain.then(catchUp)
  await chain
}

export const isChangeEvent = (event: BusEvent) => isChange(event.type)
export const isTerminal = (event: BusEvent) => TERMINAL_EVENTS.has(event.type)
