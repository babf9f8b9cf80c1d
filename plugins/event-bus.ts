import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'

/** A stored run event as it travels between instances (NOTIFY payload) and to streams. */
export interface BusEvent {
  id: number
  orgId: string
  runId: string
  rootRunId: string
  type: string
  data: Record<string, unknown> | null
  createdAt: string
  /** the payload did not fit a NOTIFY; readers load `data` from run_events */
  big?: boolean
}

export interface ControlMessage {
  kind: 'cancel'
  runId: string
}

export type EventListener = (event: BusEvent) => void

export const EVENTS_CHANNEL = 'cairn_run_events'
export const CONTROL_CHANNEL = 'cairn_run_control'

export interface EventBus {
  /** live events of one org, in commit order; returns the unsubscribe function */
  subscribe(orgId: string, listener: EventListener): () => void
  /** every live event of every org (workers) */
  subscribeAll(listener: EventListener): () => void
  onControl(listener: (message: ControlMessage) => void): () => void
  /** called after the LISTEN connection came back: notifications may have been missed */
  onResync(listener: () => void): () => void
  readonly ready: Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    eventBus: EventBus
  }
}

/**
 * One LISTEN connection per instance, fanned out in memory: SSE connections never hold a
 * pooled database connection. Every event (local ones included) arrives through NOTIFY,
 * so all instances see the same commit order.
 */
export default fp(
  async function eventBusPlugin(app: FastifyInstance) {
    const byOrg = new Map<string, Set<EventListener>>()
    const all = new Set<EventListener>()
    const control = new Set<(m: ControlMessage) => void>()
    const resync = new Set<() => void>()
    let closed = false

    // a notification carries one event, or (a statement that stored several) an array of them in id order
    function dispatchEvent(payload: string) {
      let events: BusEvent[]
      try {
        const parsed = JSON.parse(payload) as BusEvent | BusEvent[]
        events = Array.isArray(parsed) ? parsed : [parsed]
      } catch (err) {
        app.log.warn({ err }, 'event bus: unreadable notification')
        return
      }
      for (const event of events) {
        event.id = Number(event.id)
        dispatchOne(event)
      }
    }
    function dispatchOne(event: BusEvent) {
      for (const listener of all) safeCall(listener, event)
      const listeners = byOrg.get(event.orgId)
      if (listeners) for (const listener of listeners) safeCall(listener, event)
    }
    function safeCall(listener: EventListener, event: BusEvent) {
      try {
        listener(event)
      } catch (err) {
        app.log.error({ err }, 'event bus: listener failed')
      }
    }
    function dispatchControl(payload: string) {
      let message: ControlMessage
      try {
        message = JSON.parse(payload) as ControlMessage
      } catch {
        return
      }
      for (const listener of control) listener(message)
    }

    const stops: Array<() => Promise<void>> = []
    const { database } = app
    let listens = 0
    const ready = (async () => {
      const onListen = () => {
        // after a reconnect (postgres.js LISTENs again), whatever was sent meanwhile is lost
        if (++listens > 2) for (const fn of resync) fn()
      }
      stops.push(await database.listen(EVENTS_CHANNEL, dispatchEvent, onListen))
      stops.push(await database.listen(CONTROL_CHANNEL, dispatchControl, onListen))
    })()
    await ready

    const bus: EventBus = {
      ready,
      subscribe(orgId, listener) {
        let set = byOrg.get(orgId)
        if (!set) byOrg.set(orgId, (set = new Set()))
        set.add(listener)
        return () => {
          set.delete(listener)
          if (set.size === 0 && byOrg.get(orgId) === set) byOrg.delete(orgId)
        }
      },
      subscribeAll(listener) {
        all.add(listener)
        return () => all.delete(listener)
      },
      onControl(listener) {
        control.add(listener)
        return () => control.delete(listener)
      },
      onResync(listener) {
        resync.add(listener)
        return () => resync.delete(listener)
      }
    }
    app.decorate('eventBus', bus)

    app.addHook('onClose', async () => {
      if (closed) return
      closed = true
      await app.shutdown.close("the event bus's listeners", async () => {
        for (const stop of stops) {
          try {
            await stop()
          } catch {
            // the database may already be gone
          }
        }
      })
    })
  },
  { name: 'event-bus', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
