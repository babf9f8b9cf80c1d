import type { FastifyInstance } from 'fastify'
import { realUserId, type Principal } from '../auth/principal.js'
import { lookupPool, type PoolScope } from './pools.js'
import type { SearchMode } from '../retrieval/fusion.js'
import type { EmbeddingState } from '../retrieval/tables.js'
import type { SearchHit } from './backend.js'

export const SEARCH_LIMIT = { default: 20, max: 100 }

const elapsed = (started: number) => Math.round((performance.now() - started) * 100) / 100

/**
 * Who may read which pool: personal needs a real user, never the dev fallback or a key
 * (it fails closed and is never looked up).
 */
export async function poolAccess(app: FastifyInstance, principal: Principal, scope: PoolScope) {
  const user = realUserId(principal)
  const failedClosed = scope === 'personal' && user === null
  const ownerKey = scope === 'personal' ? (user ?? '') : ''
  const found = await lookupPool(app.db, principal.orgId, failedClosed ? 'org' : scope, ownerKey)
  const enabled = app.memory.backend !== null && found.orgOn
  return { enabled, authed: user !== null, failedClosed, pool: failedClosed || !enabled ? null : found.pool }
}

/** `GET /api/memory/search` as the caller: the route and the MCP tool `memory_search` both answer this. */
export async function searchMemoryAs(
  app: FastifyInstance,
  principal: Principal,
  query: { scope: PoolScope; q: string | undefined; limit: number | undefined; mode?: SearchMode | undefined }
) {
  const started = performance.now()
  const { scope } = query
  const q = (query.q ?? '').trim()
  const backend = app.memory.backend
  const user = realUserId(principal)
  // the postgres backend looks the pool up in the statement that searches it: one round trip
  if (backend?.searchAs && q !== '' && !(scope === 'personal' && user === null)) {
    const limit = Math.min(query.limit ?? SEARCH_LIMIT.default, SEARCH_LIMIT.max)
    const at = { orgId: principal.orgId, scope, ownerKey: scope === 'personal' ? user! : '' }
    const one = await backend.searchAs(at, q, limit, { mode: query.mode })
    return answer(app, scope, started, one.orgOn, user !== null, query.mode, one.pool ? one.found : null, one.states)
  }
  const a = await poolAccess(app, principal, scope)
  if (a.failedClosed)
    return { ...answer(app, scope, started, a.enabled, a.authed, query.mode, null, null), failedClosed: true as const }
  if (!a.enabled || !backend || q === '' || !a.pool)
    return answer(app, scope, started, a.enabled, a.authed, query.mode, null, null)
  const limit = Math.min(query.limit ?? SEARCH_LIMIT.default, SEARCH_LIMIT.max)
  const found = await backend.search(a.pool, q, limit, { mode: query.mode })
  // the postgres backend's items say where their vectors stand (mem0 embeds as it writes)
  const states =
    backend.name === 'postgres' && app.retrieval.vectors.available
      ? await app.retrieval.states(
          a.pool.orgId,
          'memory',
          found.items.map((h) => h.id)
        )
      : null
  return answer(app, scope, started, a.enabled, a.authed, query.mode, found, states)
}

/** A search's answer (no search: `found` null, no items). */
function answer(
  app: FastifyInstance,
  scope: PoolScope,
  started: number,
  enabled: boolean,
  authed: boolean,
  mode: SearchMode | undefined,
  found: { items: SearchHit[]; truncated: boolean; mode: SearchMode } | null,
  states: Map<string, { state: EmbeddingState }> | null
) {
  const base = {
    enabled: enabled && app.memory.backend !== null,
    scope,
    authed,
    truncated: false,
    mode: app.retrieval.modeFor(mode)
  }
  if (!found) return { ...base, latencyMs: elapsed(started), items: [] }
  return {
    ...base,
    truncated: found.truncated,
    mode: found.mode,
    latencyMs: elapsed(started),
    items: found.items.map((h) => ({
      id: h.id,
      content: h.content,
      sourceScope: scope,
      score: h.score,
      scores: h.scores,
      ...(states ? { embedding: states.get(h.id)?.state ?? ('pending' as const) } : {}),
      citation: { kind: 'memory' as const, id: h.id, runId: h.runId, rootRunId: h.rootRunId, createdAt: h.createdAt }
    }))
  }
}
