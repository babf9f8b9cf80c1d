import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Principal } from '../auth/principal.js'
import { inArray } from 'drizzle-orm'
import { users } from '../auth/tables.js'
import type { Config } from '../config.js'
import type { Db } from '../db/client.js'
import type { RecalledItem, RunEventSink, RunMemory } from '../runs/ports/memory.js'
import type { MemoryBackend } from './backend.js'
import { createMem0Pool } from './mem0-pool.js'
import { createCaptureWorker, type CaptureWorker } from './capture-worker.js'
import { cleanFacts, enqueueCaptureRow } from './captures-repo.js'
import { ensurePool, orgMemoryOn, orgMemorySettings, recallLookup } from './pools.js'
import { significantWords } from '../retrieval/significant-words.js'
import type { CaptureFact } from './tables.js'
import { createPostgresPool } from './postgres-pool.js'
import { recordRecalls } from './recall-ledger-repo.js'
import { newId } from '../db/ids.js'
import type { RetrievalService } from '../retrieval/service.js'

export interface MemoryHub {
  /** null when MEMORY_BACKEND=off */
  readonly backend: MemoryBackend | null
  readonly maxAttempts: number
  /** memory on for this org: the backend is configured and the org has not switched it off */
  enabledFor(orgId: string): Promise<boolean>
  /** the runs group's seam (src/runs/ports/memory.ts) */
  readonly forRuns: RunMemory
  /** the capture delivery worker of this instance (null when off) */
  readonly worker: CaptureWorker | null
  /** where a delivered capture is announced as the run's `memory.captured` event */
  readonly events: RunEventSink
  /** a background PATCH still being applied; drained on close */
  track(work: Promise<unknown>): void
  drain(): Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    memory: MemoryHub
  }
}

/** Who made a change, as item history records it. */
export function changedByOf(principal: Principal): string {
  if (principal.kind === 'user' && principal.userId) return principal.userId
  if (principal.kind === 'key') return `api-key:${principal.keyId ?? 'unknown'}`
  return 'dev'
}

/**
 * A history's authors as people read them: a person by name (else email), never a raw id; a
 * run, an API key or the dev org by what they are. A person who left the deployment is "a former user".
 */
export async function withNames<T extends { changedBy: string }>(
  db: Db,
  history: T[]
): Promise<Array<T & { changedByName: string }>> {
  const isPerson = (by: string) => !by.startsWith('run:') && !by.startsWith('api-key:') && by !== 'dev'
  const ids = [...new Set(history.map((h) => h.changedBy).filter(isPerson))]
  const people =
    ids.length === 0
      ? []
      : await db
          .select({ id: users.id, name: users.name, email: users.email })
          .from(users)
          .where(inArray(users.id, ids))
  const names = new Map(people.map((p) => [p.id, p.name.trim() !== '' ? p.name : p.email]))
  return history.map((h) => ({
    ...h,
    changedByName: h.changedBy.startsWith('run:')
      ? 'a run'
      : h.changedBy.startsWith('api-key:')
        ? 'an API key'
        : h.changedBy === 'dev'
          ? 'the dev organization'
          : (names.get(h.changedBy) ?? 'a former user')
  }))
}

/** The variables the Memory Hub reads: a read of another is a type error. */
export type MemoryConfig = Pick<
  Config,
  | 'MEMORY_BACKEND'
  | 'MEMORY_SEARCH_CACHE'
  | 'MEMORY_URL'
  | 'MEMORY_API_KEY'
  | 'MEMORY_HTTP_TIMEOUT_MS'
  | 'MEMORY_CAPTURE_LEASE_MS'
  | 'MEMORY_CAPTURE_BACKOFF_MS'
  | 'MEMORY_CAPTURE_BACKOFF_MAX_MS'
  | 'MEMORY_CAPTURE_POLL_MS'
  | 'MEMORY_CAPTURE_BATCH'
  | 'MEMORY_CAPTURE_CONCURRENCY'
  | 'MEMORY_CAPTURE_ATTEMPTS'
  | 'MEMORY_RECALL_LIMIT'
  | 'MEMORY_CAPTURE_WORKER'
>

export interface MemoryServiceOptions {
  config: MemoryConfig
  /** search by words and meaning (the postgres backend), and the embedding job it wakes */
  retrieval: RetrievalService
  /** the runs group's event sink: a delivered capture becomes the run's `memory.captured` */
  events: RunEventSink
}

export function createMemoryHub(
  db: Db,
  { config, events, retrieval }: MemoryServiceOptions,
  log: FastifyInstance['log']
): MemoryHub {
  let backend: MemoryBackend | null = null
  if (config.MEMORY_BACKEND === 'postgres')
    backend = createPostgresPool(db, {
      searchCache: config.MEMORY_SEARCH_CACHE,
      retrieval,
      wake: () => retrieval.worker?.wake()
    })
  if (config.MEMORY_BACKEND === 'http') {
    if (!config.MEMORY_URL) throw new Error('MEMORY_BACKEND=http needs MEMORY_URL')
    backend = createMem0Pool(db, {
      url: config.MEMORY_URL,
      apiKey: config.MEMORY_API_KEY,
      timeoutMs: config.MEMORY_HTTP_TIMEOUT_MS
    })
  }
  const pending = new Set<Promise<unknown>>()
  const OFF = { enabled: false, extract: false }

  const enabledFor = async (orgId: string) => backend !== null && (await orgMemoryOn(db, orgId))

  const worker =
    backend &&
    createCaptureWorker({
      db,
      backend,
      log,
      poolFor: async (orgId, owner) =>
        (await enabledFor(orgId)) ? ensurePool(db, orgId, owner === null ? 'org' : 'personal', owner ?? '') : null,
      events,
      leaseMs: config.MEMORY_CAPTURE_LEASE_MS,
      backoffMs: config.MEMORY_CAPTURE_BACKOFF_MS,
      backoffMaxMs: config.MEMORY_CAPTURE_BACKOFF_MAX_MS,
      pollMs: config.MEMORY_CAPTURE_POLL_MS,
      batch: config.MEMORY_CAPTURE_BATCH,
      concurrency: config.MEMORY_CAPTURE_CONCURRENCY
    })

  const runMemory: RunMemory = {
    enabled: enabledFor,
    async settingsFor(orgId) {
      if (!backend) return { enabled: false, extract: false }
      const settings = await orgMemorySettings(db, orgId)
      return { enabled: settings.enabled, extract: settings.enabled && settings.extract }
    },
    async recall(run, text, options) {
      const query = options.kind === 'prompt' ? significantWords(text).join(' ') : text.trim()
      const limit = options.kind === 'prompt' ? config.MEMORY_RECALL_LIMIT : options.limit
      if (!backend) return { items: [], query, ...(options.enabled === undefined ? { settings: OFF } : {}) }
      const scopes: Array<['org' | 'personal', string]> = [['org', '']]
      // only a real signed-in user ever has a personal pool read for them
      if (run.realUserId) scopes.push(['personal', run.realUserId])
      const mode = retrieval.modeFor(options.mode)
      // one statement: the settings (unless given), the pools, and the frames with nothing to search
      const looked = await recallLookup(
        db,
        run,
        scopes.map(([scope, ownerKey]) => ({ id: newId(), scope, ownerKey, query, mode })),
        options.enabled
      )
      const settings = options.enabled === undefined ? { enabled: looked.enabled, extract: looked.extract } : undefined
      if (!looked.enabled) return { items: [], query, settings }
      const items: RecalledItem[] = []
      const frames: Array<Parameters<typeof recordRecalls>[2][number]> = []
      for (const [scope, ownerKey] of scopes) {
        const pool = looked.pools.get(ownerKey)
        if (!pool || query === '') continue
        const searchStarted = performance.now()
        let hits: RecalledItem[] = []
        let used = mode
        try {
          const found = await backend.search(pool, query, limit, {
            anyWord: options.kind === 'prompt',
            mode: options.mode,
            // a prompt's meaning is the prompt, not its significant words
            meaning: options.kind === 'prompt' ? text : undefined
          })
          used = found.mode
          hits = found.items.map((h) => ({
            id: h.id,
            content: h.content,
            sourceScope: scope,
            score: h.score,
            scores: h.scores
          }))
        } catch (err) {
          log.warn({ err, runId: run.id, orgId: run.orgId }, 'memory recall failed')
        }
        frames.push({
          scope,
          query,
          itemIds: hits.map((h) => h.id),
          latencyMs: performance.now() - searchStarted,
          mode: used
        })
        items.push(...hits)
      }
      // the searched scopes' frames, in one statement
      if (frames.length > 0) await recordRecalls(db, run, frames)
      // two pools' fused scores compare (both reciprocal ranks), as their full-text ones did
      items.sort((a, b) => b.score - a.score)
      return { items: items.slice(0, limit), query, settings }
    },

    async enqueueCapture(tx, run, facts) {
      // a personal fact needs the run's real user (the remember tool refuses it otherwise)
      const kept = cleanFacts(
        facts.flatMap((f): CaptureFact[] =>
          typeof f === 'string'
            ? [f]
            : f.scope === 'org'
              ? [f.content]
              : run.realUserId
                ? [{ content: f.content, scope: 'personal', owner: run.realUserId }]
                : []
        )
      )
      if (!backend || kept.length === 0) return
      if (!(await orgMemoryOn(tx, run.orgId))) return
      await enqueueCaptureRow(tx, run, kept, config.MEMORY_CAPTURE_ATTEMPTS)
    }
  }

  return {
    backend,
    maxAttempts: config.MEMORY_CAPTURE_ATTEMPTS,
    enabledFor,
    forRuns: runMemory,
    worker,
    events,
    track(work) {
      const tracked = work
        .catch((err: unknown) => log.error({ err }, 'background memory update failed'))
        .finally(() => pending.delete(tracked))
      pending.add(tracked)
    },
    async drain() {
      while (pending.size > 0) await Promise.all([...pending])
    }
  }
}

/**
 * The Memory Hub service, decorated on the root instance as `app.memory` so the runs group
 * reaches `app.memory.forRuns`. The delivery worker starts with the app and stops, after
 * its deliveries in flight, when the app closes.
 */
export default fp(
  async function memoryService(app: FastifyInstance, opts: MemoryServiceOptions) {
    const hub = createMemoryHub(app.db, opts, app.log)
    app.decorate('memory', hub)
    app.addHook('onReady', async () => {
      if (opts.config.MEMORY_CAPTURE_WORKER) hub.worker?.start()
    })
    // preClose runs before any onClose hook, so deliveries in flight finish while the database is still open
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the memory capture worker', async (ms) => {
        await hub.worker?.stop(ms)
        await hub.drain()
      })
    })
  },
  { name: 'memory', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
