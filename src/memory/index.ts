import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import {
  conflict,
  memoryDisabled,
  noDeadCapture,
  noOrphanCapture,
  notInPool,
  signInRequired,
  validationFailed
} from '../../plugins/errors.js'
import { principalOf, realUserId, type Principal } from '../auth/principal.js'
import { errorResponses } from '../../schemas/common.js'
import {
  AddItemBody,
  AddItemResponse,
  BrowseQuery,
  BrowseResponse,
  CapturesQuery,
  CapturesResponse,
  DeleteResponse,
  EmbedResponse,
  HistoryResponse,
  ItemParams,
  MemoryRefusals,
  Ok,
  PatchBody,
  RecallsQuery,
  RecallsResponse,
  ResolveBody,
  RunParams,
  ScopeQuery,
  SearchQuery,
  SearchResponse,
  Settings,
  SettingsBody
} from '../../schemas/memory.js'
import { decodeCursor } from '../db/paging.js'
import type { PoolRef } from './backend.js'
import { changedByOf, withNames } from './service.js'
import { announceCaptured } from './capture-worker.js'
import { listCaptures, resolveOrphan, retryDeadCapture } from './captures-repo.js'
import { ensurePool, lookupPool, orgMemorySettings, parseScope, setOrgMemory, type PoolScope } from './pools.js'
import { listRecalls } from './recall-ledger-repo.js'
import { searchMemoryAs } from './search-as.js'

const BROWSE_LIMIT = { default: 50, max: 200 }

const elapsed = (started: number) => Math.round((performance.now() - started) * 100) / 100

/** The Memory Hub routes. Pool identity always comes from the principal. */
const memory: FastifyPluginAsyncTypebox<{ backendName: 'postgres' | 'http' | 'off' }> = async (app, opts) => {
  const hub = app.memory

  /** Who may read or write which pool; personal needs a real user, never the dev fallback or a key. */
  async function access(principal: Principal, scope: PoolScope) {
    const user = realUserId(principal)
    const failedClosed = scope === 'personal' && user === null
    const ownerKey = scope === 'personal' ? (user ?? '') : ''
    // a failed-closed request never looks a personal pool up
    const found = await lookupPool(app.db, principal.orgId, failedClosed ? 'org' : scope, ownerKey)
    const enabled = hub.backend !== null && found.orgOn
    return { enabled, authed: user !== null, failedClosed, pool: failedClosed || !enabled ? null : found.pool }
  }

  /** The pool a write acts on, or the spec's 403s and 404s. */
  async function writablePool(principal: Principal, scope: PoolScope): Promise<PoolRef> {
    const a = await access(principal, scope)
    if (a.failedClosed) throw signInRequired()
    if (!a.enabled || !hub.backend) throw memoryDisabled()
    if (!a.pool) throw notInPool()
    return a.pool
  }

  app.get(
    '/memory/search',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'searchMemory',
        tags: ['memory'],
        summary: 'Search a pool (org by default, or your personal pool)',
        description:
          "Searches the organization's memory pool, or the caller's personal pool, for facts matching the query, ranked, and reports how long it took.",
        querystring: SearchQuery,
        response: { 200: SearchResponse, ...errorResponses(502) }
      }
    },
    async (request) => {
      return searchMemoryAs(app, principalOf(request), {
        scope: parseScope(request.query.scope),
        q: request.query.q,
        limit: request.query.limit,
        mode: request.query.mode
      })
    }
  )

  /**
   * Where each item's vector stands (the postgres backend where vectors exist; mem0 embeds as
   * it writes, and without pgvector there are none): fields to spread into an item.
   */
  const vectorStates = () => hub.backend?.name === 'postgres' && app.retrieval.vectors.available
  async function embeddingStates(pool: PoolRef, ids: string[]) {
    if (!vectorStates()) return (_id: string) => ({})
    const states = await app.retrieval.states(pool.orgId, 'memory', ids)
    return (id: string) => {
      const s = states.get(id) ?? { state: 'pending' as const, error: null }
      // the reason only where there is one: a failed embedding
      return s.state === 'failed' ? { embedding: s.state, embeddingError: s.error } : { embedding: s.state }
    }
  }

  app.post(
    '/memory/item/:id/embed',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'embedMemoryItem',
        tags: ['memory'],
        summary: 'Embed a fact again (after its embedding failed)',
        description:
          "Puts a fact's embedding back in the queue with a fresh budget of tries and wakes the embedding worker; the fact stays findable by its words meanwhile.",
        params: ItemParams,
        querystring: ScopeQuery,
        response: { 202: EmbedResponse, ...errorResponses(404, 409), ...MemoryRefusals.embed }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const pool = await writablePool(principal, parseScope(request.query.scope))
      if (hub.backend!.name !== 'postgres')
        throw conflict('this memory backend embeds facts itself: there is nothing to embed again')
      if (!app.retrieval.vectors.available)
        throw conflict('semantic search is off on this server (no pgvector): facts are found by their words')
      if (!(await hub.backend!.exists(pool, request.params.id))) throw notInPool()
      await app.retrieval.reembed(pool.orgId, { kind: 'memory', id: request.params.id, poolId: pool.id })
      return reply.code(202).send({ ok: true as const, embedding: 'pending' as const })
    }
  )

  app.get(
    '/memory/browse',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'browseMemory',
        tags: ['memory'],
        summary: 'Stored facts of a pool, newest first',
        description: "Pages through the facts stored in a memory pool, newest first, with the pool's total.",
        querystring: BrowseQuery,
        response: { 200: BrowseResponse, ...errorResponses(502) }
      }
    },
    async (request) => {
      const started = performance.now()
      const principal = principalOf(request)
      const scope = parseScope(request.query.scope)
      // a cursor no page handed out is refused whatever the pool holds (even nothing), so a
      // client that mangled one hears it at once rather than when the pool fills
      const cursor = request.query.cursor
      if (cursor !== undefined) {
        if (hub.backend) hub.backend.checkCursor(cursor)
        else decodeCursor(cursor)
      }
      const a = await access(principal, scope)
      const empty = { enabled: a.enabled, scope, authed: a.authed, total: 0, items: [], nextCursor: null }
      if (a.failedClosed) return { ...empty, latencyMs: elapsed(started), failedClosed: true as const }
      if (!a.enabled || !hub.backend) return { ...empty, latencyMs: elapsed(started) }
      const pool = a.pool
      if (!pool) return { ...empty, latencyMs: elapsed(started) }
      const limit = Math.min(request.query.limit ?? BROWSE_LIMIT.default, BROWSE_LIMIT.max)
      const page = await hub.backend.browse(pool, limit, request.query.cursor)
      const states = await embeddingStates(
        pool,
        page.items.map((i) => i.id)
      )
      return {
        ...empty,
        total: page.total,
        latencyMs: elapsed(started),
        items: page.items.map((i) => ({ ...i, sourceScope: scope, ...states(i.id) })),
        nextCursor: page.nextCursor
      }
    }
  )

  app.post(
    '/memory/items',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'addMemoryItem',
        tags: ['memory'],
        summary: 'Add a fact by hand (the pool is made on this first write)',
        description:
          'Stores a fact typed by a person in the org or personal pool, creating the pool on its first write; an identical fact already there is a 409.',
        body: AddItemBody,
        response: { 201: AddItemResponse, ...errorResponses(409, 413, 415, 502), ...MemoryRefusals.add }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      // a write is never guessed into a pool: a typo of "personal" must not share a private note with the org
      const given = request.body.scope
      if (given !== undefined && given !== 'org' && given !== 'personal')
        throw validationFailed([{ path: '/body/scope', message: 'must be "org" or "personal"' }])
      const scope = parseScope(given)
      const a = await access(principal, scope)
      if (a.failedClosed) throw signInRequired()
      if (!a.enabled || !hub.backend) throw memoryDisabled()
      const pool =
        a.pool ?? (await ensurePool(app.db, principal.orgId, scope, scope === 'personal' ? realUserId(principal)! : ''))
      const item = await hub.backend.add(pool, request.body.content.trim(), changedByOf(principal))
      // a fact just written has no vector yet (the embedding job takes it in after the commit): its state
      // is known without asking, which keeps the write path to the fact's own statements
      const embedding = vectorStates() ? { embedding: 'pending' as const } : {}
      return reply.code(201).send({ item: { ...item, sourceScope: scope, ...embedding } })
    }
  )

  app.patch(
    '/memory/item/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updateMemoryItem',
        tags: ['memory'],
        summary: 'Correct a stored fact',
        description:
          'Replaces the text of a stored fact and records the change in its history; with `background` the change is applied after the answer.',
        params: ItemParams,
        querystring: ScopeQuery,
        body: PatchBody,
        response: { 200: Ok, ...errorResponses(404, 413, 415, 502), ...MemoryRefusals.update }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const scope = parseScope(request.body.scope ?? request.query.scope)
      const pool = await writablePool(principal, scope)
      const backend = hub.backend!
      const content = request.body.content.trim()
      const by = changedByOf(principal)
      if (request.body.background) {
        if (!(await backend.exists(pool, request.params.id))) throw notInPool()
        hub.track(backend.update(pool, request.params.id, content, by))
        return { ok: true as const }
      }
      if (!(await backend.update(pool, request.params.id, content, by))) throw notInPool()
      return { ok: true as const }
    }
  )

  app.delete(
    '/memory/item/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteMemoryItem',
        tags: ['memory'],
        summary: 'Delete a stored fact',
        description: 'Deletes a stored fact from the chosen pool and records who deleted it.',
        params: ItemParams,
        querystring: ScopeQuery,
        response: { 200: DeleteResponse, ...errorResponses(404, 502), ...MemoryRefusals.remove }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const pool = await writablePool(principal, parseScope(request.query.scope))
      const deletedCount = await hub.backend!.remove(pool, request.params.id, changedByOf(principal))
      if (deletedCount === 0) throw notInPool()
      return { ok: true as const, deletedCount }
    }
  )

  app.get(
    '/memory/item/:id/history',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getMemoryItemHistory',
        tags: ['memory'],
        summary: 'Every change to a stored fact, oldest first, with who made it',
        description:
          'Lists every change made to a stored fact (added, updated, deleted), oldest first, each with who made it and when.',
        params: ItemParams,
        querystring: ScopeQuery,
        response: { 200: HistoryResponse, ...errorResponses(404), ...MemoryRefusals.history }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const scope = parseScope(request.query.scope)
      const a = await access(principal, scope)
      if (a.failedClosed) throw signInRequired()
      if (!a.enabled || !hub.backend) return { history: [] }
      const pool = a.pool
      const history = pool ? await hub.backend.history(pool, request.params.id) : null
      if (!history) throw notInPool()
      return { history: await withNames(app.db, history) }
    }
  )

  app.get(
    '/memory/captures',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listCaptures',
        tags: ['memory'],
        summary: 'The capture outbox of your org, newest first; orphans are marked',
        description:
          'Pages through the capture outbox: the facts runs handed to memory and where each delivery stands, with crash-orphaned deliveries marked.',
        querystring: CapturesQuery,
        response: { 200: CapturesResponse, ...errorResponses() }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      return listCaptures(app.db, principal.orgId, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor,
        state: request.query.state
      })
    }
  )

  app.post(
    '/memory/captures/:runId/retry',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'retryCapture',
        tags: ['memory'],
        summary: 'Re-enqueue a dead capture with a fresh attempt budget',
        description:
          "Puts a run's dead capture back in the queue with a fresh budget of attempts and wakes the capture worker.",
        params: RunParams,
        querystring: ScopeQuery,
        response: { 200: Ok, ...errorResponses(404), ...MemoryRefusals.retry }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      if (!(await retryDeadCapture(app.db, principal.orgId, request.params.runId, hub.maxAttempts))) {
        throw noDeadCapture()
      }
      hub.worker?.wake()
      return { ok: true as const }
    }
  )

  app.post(
    '/memory/captures/:runId/resolve',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'resolveCapture',
        tags: ['memory'],
        summary: 'Settle a crash-orphaned delivery by hand: delivered or discard (at most once)',
        description:
          'Settles a delivery whose worker died mid-write: `delivered` records that it reached the pool, `discard` drops it; each orphan can be settled once.',
        params: RunParams,
        querystring: ScopeQuery,
        body: ResolveBody,
        response: { 200: Ok, ...errorResponses(404, 413, 415), ...MemoryRefusals.resolve }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const resolved = await resolveOrphan(app.db, principal.orgId, request.params.runId, request.body.resolution)
      if (!resolved) {
        throw noOrphanCapture()
      }
      // a person confirmed the write happened: the run's stream hears it as a delivery would
      if (request.body.resolution === 'delivered') {
        await announceCaptured(
          app.memory.events,
          request.log,
          {
            orgId: principal.orgId,
            runId: request.params.runId,
            rootRunId: resolved.rootRunId,
            itemCount: resolved.itemCount
          },
          { resolved: true }
        )
      }
      return { ok: true as const }
    }
  )

  app.get(
    '/memory/recalls',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listRecalls',
        tags: ['memory'],
        summary: 'The recall ledger: every retrieval made for a run, newest first',
        description:
          'Pages through the recall ledger: each memory retrieval made for a run, with its pool scope, query, the ids of the facts found and its latency.',
        querystring: RecallsQuery,
        response: { 200: RecallsResponse, ...errorResponses() }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const { limit, cursor, runId, rootRunId } = request.query
      return listRecalls(app.db, principal.orgId, { limit: limit ?? 50, cursor, runId, rootRunId })
    }
  )

  async function settingsOf(orgId: string) {
    const { enabled: orgEnabled, extract } = await orgMemorySettings(app.db, orgId)
    return { enabled: orgEnabled && hub.backend !== null, extract, orgEnabled, backend: opts.backendName }
  }

  app.get(
    '/memory/settings',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getMemorySettings',
        tags: ['memory'],
        summary: 'Whether memory is on for your org, and whether facts are extracted from its runs',
        description:
          'Reports whether memory is on for the organization, whether facts are extracted from its runs, and which memory backend serves it.',
        querystring: ScopeQuery,
        response: { 200: Settings, ...errorResponses() }
      }
    },
    async (request) => settingsOf(principalOf(request).orgId)
  )

  app.put(
    '/memory/settings',
    {
      config: { scope: 'admin', keyAccess: 'none' },
      schema: {
        operationId: 'updateMemorySettings',
        tags: ['memory'],
        summary: 'Turn memory, and extraction from runs, off or on for your org (org admins)',
        description:
          'Switches memory, and the extraction of facts from runs, on or off for the whole organization; only admins may.',
        body: SettingsBody,
        response: { 200: Settings, ...errorResponses(413, 415) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      await setOrgMemory(app.db, principal.orgId, request.body, changedByOf(principal))
      return settingsOf(principal.orgId)
    }
  )
}

export default memory
