import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { BlobStore } from '../artifacts/blob-store.js'
import type { Clock } from '../worker-loop.js'
import type { Config } from '../config.js'
import type { RetrievalService } from '../retrieval/service.js'
import type { RunKnowledge } from '../runs/ports/knowledge.js'
import { createDocumentWorker, type DocumentWorker, type Extractor } from './document-worker.js'
import { createDraft } from './drafts-repo.js'
import { getRecord, insertRecord, removeRecord, reviseRecord } from './records-repo.js'
import type { WikiRecords } from '../github/ports.js'
import { extractMarkdown } from './extract.js'
import { cachedSearch, snippetText, type Search } from '../retrieval/knowledge-search.js'

/** The longest chunk, in characters. */
export const MAX_CHUNK_CHARS = 2000

/** The knowledge group's instance-wide side, as `app.knowledge`. */
export interface KnowledgeService {
  /** extracts uploaded documents into chunks (started with the app when KNOWLEDGE_WORKER) */
  worker: DocumentWorker
  /** where document bytes live (the artifacts group's store) */
  store: BlobStore
  /** UPLOAD_MAX_BYTES: the largest document */
  maxBytes: number
  /** KNOWLEDGE_MAX_ATTEMPTS: the claims a new document gets */
  maxAttempts: number
  /** records and chunks in one ranked list, through the generation-keyed result cache */
  search: Search
  /** the runs group's port: what a run proposes and searches */
  forRuns: RunKnowledge
  /** the github group's port: repo wiki pages are records */
  forWiki: WikiRecords
}

declare module 'fastify' {
  interface FastifyInstance {
    knowledge: KnowledgeService
  }
}

/** The variables the knowledge service reads: a read of another is a type error. */
export type KnowledgeConfig = Pick<
  Config,
  | 'UPLOAD_MAX_BYTES'
  | 'KNOWLEDGE_EXTRACT_TIMEOUT_MS'
  | 'KNOWLEDGE_EXTRACT_MEMORY_MB'
  | 'KNOWLEDGE_LEASE_MS'
  | 'KNOWLEDGE_POLL_MS'
  | 'KNOWLEDGE_CONCURRENCY'
  | 'KNOWLEDGE_BACKOFF_MS'
  | 'KNOWLEDGE_BACKOFF_MAX_MS'
  | 'KNOWLEDGE_MAX_ATTEMPTS'
  | 'KNOWLEDGE_SEARCH_CACHE'
  | 'KNOWLEDGE_WORKER'
>

export interface KnowledgeServiceOptions {
  config: KnowledgeConfig
  /** the artifacts group's blob store: documents keep their bytes there */
  store: BlobStore
  /** replaces the text extraction (tests: one that never finishes, to kill a worker mid-extraction) */
  extract?: Extractor | undefined
  /** the time failed documents back off by */
  clock: Clock
  /** search by words and meaning, and the embedding job that new texts wake */
  retrieval: RetrievalService
}

/**
 * The knowledge service: the document extraction worker (started with the app, stopped
 * before the database closes) and the port runs propose and search through.
 */
export default fp(
  async function knowledgeService(app: FastifyInstance, opts: KnowledgeServiceOptions) {
    const { config, store } = opts
    const limits = {
      timeoutMs: config.KNOWLEDGE_EXTRACT_TIMEOUT_MS,
      maxMemoryMb: config.KNOWLEDGE_EXTRACT_MEMORY_MB,
      // a chunk of text per 2,000 characters: 5 million characters are 2,500 chunks
      maxOutputChars: 5_000_000
    }
    const worker = createDocumentWorker({
      db: app.db,
      store,
      log: app.log.child({ component: 'knowledge-worker' }),
      extract: opts.extract ?? ((bytes, kind, signal) => extractMarkdown(bytes, kind, limits, signal)),
      leaseMs: config.KNOWLEDGE_LEASE_MS,
      pollMs: config.KNOWLEDGE_POLL_MS,
      concurrency: config.KNOWLEDGE_CONCURRENCY,
      maxChunkChars: MAX_CHUNK_CHARS,
      backoffMs: config.KNOWLEDGE_BACKOFF_MS,
      backoffMaxMs: config.KNOWLEDGE_BACKOFF_MAX_MS,
      clock: opts.clock
    })
    const search = cachedSearch(app.db, opts.retrieval, config.KNOWLEDGE_SEARCH_CACHE)
    const forRuns: RunKnowledge = {
      async propose(run, draft) {
        const row = await createDraft(app.db, run.orgId, {
          title: draft.title,
          body: draft.body,
          tags: [...new Set(draft.tags ?? [])],
          targetRecordId: draft.targetRecordId ?? null,
          runId: run.runId,
          createdBy: null
        })
        return { draftId: row.id, title: row.title }
      },
      async search(run, query, limit, mode) {
        const { items } = await search(run.orgId, { q: query, limit, mode })
        // a model reads plain text, not the console's HTML
        return items.map((hit) => ({ ...hit, snippet: snippetText(hit.snippet) }))
      }
    }
    const forWiki: WikiRecords = {
      async create(tx, orgId, page, createdBy) {
        return (await insertRecord(tx, orgId, { ...page, createdBy })).id
      },
      async revise(tx, orgId, recordId, page, changedBy) {
        const revised = await reviseRecord(tx, orgId, recordId, page, null, changedBy)
        return typeof revised !== 'string'
      },
      remove: removeRecord,
      async exists(db, orgId, recordId) {
        return (await getRecord(db, orgId, recordId)) !== null
      }
    }
    app.decorate('knowledge', {
      worker,
      store,
      maxBytes: config.UPLOAD_MAX_BYTES,
      maxAttempts: config.KNOWLEDGE_MAX_ATTEMPTS,
      search,
      forRuns,
      forWiki
    } satisfies KnowledgeService)
    app.addHook('onReady', async () => {
      if (config.KNOWLEDGE_WORKER) worker.start()
    })
    app.addHook('preClose', async () => {
      await app.shutdown.drain('the document worker', (ms) => worker.stop(ms))
    })
  },
  { name: 'knowledge', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
