import type { RunDirectory, RunEventWriter } from '../../src/runtime/ports.js'

/** A tiny run directory: runs added by the test, each in one org and thread. */
export function fakeRuns() {
  const runs = new Map<string, { orgId: string; rootRunId: string }>()
  const directory: RunDirectory & { add(orgId: string, runId: string, rootRunId?: string): void } = {
    add(orgId, runId, rootRunId = runId) {
      runs.set(runId, { orgId, rootRunId })
    },
    async threadOfRun(orgId, runId) {
      const run = runs.get(runId)
      return run && run.orgId === orgId ? { rootRunId: run.rootRunId } : null
    },
    async threadExists(orgId, rootRunId) {
      return [...runs.values()].some((r) => r.orgId === orgId && r.rootRunId === rootRunId)
    }
  }
  return directory
}

export interface RecordedEvent {
  orgId: string
  runId: string
  type: string
  data: Record<string, unknown>
}

/** Records run events; `next(type)` resolves once an event of that type was emitted. */
export function eventRecorder() {
  const events: RecordedEvent[] = []
  let wake: Array<() => void> = []
  const writer: RunEventWriter & {
    events: RecordedEvent[]
    of(runId: string): RecordedEvent[]
    next(type: string, runId: string): Promise<RecordedEvent>
  } = {
    events,
    of(runId) {
      return events.filter((e) => e.runId === runId)
    },
    async emit(orgId, runId, type, data) {
      events.push({ orgId, runId, type, data })
      for (const w of wake.splice(0)) w()
    },
    async next(type, runId) {
      for (;;) {
        const found = events.find((e) => e.type === type && e.runId === runId)
        if (found) return found
        await new Promise<void>((resolve) => wake.push(resolve))
      }
    }
  }
  return writer
}
