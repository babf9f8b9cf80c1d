import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newId } from '../../src/db/ids.js'
import type { MemoryTools, RunDirectory, RunEventWriter } from '../../src/runtime/ports.js'
import type { EnvOverrides, Teardown } from '../helper.js'
import { buildRuntimeApp } from './group.js'

/** A tiny run directory: runs added by the test, each in one org and thread. */
export function fakeRuns() {
  const runs = new Map<string, { orgId: string; rootRunId: string }>()
  const directory: RunDirectory & { add(orgId: string, runId: string, rootRunId?: string): void } = {
    add(orgId, runId, rootRunId = runId) {
      runs.set(runId, { orgId, rootRunId })
    },
    async threadOfRun(orgId, runId) {
      const run = runs.get(runId)
      return run && run.orgId === orgId ? { rootRunId: run.rootRunId, userId: null } : null
    },
    async threadExists(orgId, rootRunId) {
      return [...runs.values()].some((r) => r.orgId === orgId && r.rootRunId === rootRunId)
    },
    async existingThreads(keys) {
      return new Set(
        keys
          .filter((k) => [...runs.values()].some((r) => r.orgId === k.orgId && r.rootRunId === k.threadId))
          .map((k) => `${k.orgId}/${k.threadId}`)
      )
    },
    // no runs table: nothing to lock or to let go on
    async hold() {},
    async decided() {}
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
  const wake: Array<() => void> = []
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

/**
 * The runtime group (./group.ts) seeing the fake run directory and event recorder, in its own data dir.
 * Its tools need a sandbox wherever the tests run: bubblewrap where it works (CI),
 * plain processes elsewhere, so SANDBOX_UNCONFINED is on.
 */
export async function buildGatewayApp(t: Teardown, env: EnvOverrides = {}, memory?: MemoryTools) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-gateway-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const runs = fakeRuns()
  const events = eventRecorder()
  const app = await buildRuntimeApp(t, {
    env: { DATA_DIR: dataDir, SANDBOX_UNCONFINED: 'true', ...env },
    runtime: { runs, events, ...(memory ? { memory } : {}) }
  })
  return { app, runs, events, dataDir }
}

/**
 * A test file's `setup()`: a fresh run and thread in the dev org, on one app shared by the
 * file's tests (built on first use, torn down with `fileTap`), or on an app of the test's own.
 */
export function gatewaySetup(fileTap: Teardown, sharedEnv: EnvOverrides = {}, sharedMemory?: MemoryTools) {
  let shared: ReturnType<typeof buildGatewayApp> | undefined
  return async (own?: { t: Teardown; env?: EnvOverrides; memory?: MemoryTools }) => {
    const base = own
      ? await buildGatewayApp(own.t, own.env, own.memory)
      : await (shared ??= buildGatewayApp(fileTap, sharedEnv, sharedMemory))
    const runId = newId()
    const threadId = newId()
    base.runs.add(DEV_ORG.id, runId, threadId)
    return { ...base, runId, threadId, workspace: join(base.dataDir, 'sandboxes', DEV_ORG.id, threadId) }
  }
}
