import { ApiError, conflict, deleteFailed, updateFailed, upstreamFailed } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { invalidCursor } from '../db/paging.js'
import { PoolWriteError, type BrowseItem, type MemoryBackend, type PoolRef, type SearchHit } from './backend.js'
import { readHistory, recordChanges } from './history-repo.js'

export interface Mem0Options {
  url: string
  apiKey?: string | undefined
  timeoutMs: number
}

interface Mem0Item {
  id: string
  memory?: string
  text?: string
  user_id?: string | null
  metadata?: Record<string, unknown> | null
  score?: number
  created_at?: string | null
  updated_at?: string | null
}

/** The mem0 `user_id` a pool maps to: tenancy travels with every upstream call. */
export function mem0UserId(pool: PoolRef): string {
  return pool.scope === 'org' ? `cairn:${pool.orgId}` : `cairn:${pool.orgId}:user:${pool.ownerKey}`
}

function listOf(body: unknown): Mem0Item[] | null {
  const list = Array.isArray(body) ? body : (body as { results?: unknown } | null)?.results
  if (!Array.isArray(list)) return null
  return list.filter(
    (x): x is Mem0Item => typeof x === 'object' && x !== null && typeof (x as Mem0Item).id === 'string'
  )
}

const text = (item: Mem0Item) => item.memory ?? item.text ?? ''
const iso = (value: string | null | undefined) => {
  const d = value ? new Date(value) : new Date(0)
  return Number.isNaN(d.getTime()) ? new Date(0).toISOString() : d.toISOString()
}
const meta = (item: Mem0Item, key: string) => {
  const v = item.metadata?.[key]
  return typeof v === 'string' ? v : null
}

/**
 * An upstream memory service speaking the mem0 REST API (`POST /memories`,
 * `GET /memories`, `GET|PUT|DELETE /memories/:id`, `POST /search`). History is kept in our
 * own database for the changes made through us.
 */
export function createMem0Pool(db: Db, opts: Mem0Options): MemoryBackend {
  const base = opts.url.replace(/\/+$/, '')

  async function call(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
    // Not AbortSignal.timeout(): combined through AbortSignal.any, Node 20 can collect that
    // signal before it fires, and a hanging upstream then hangs its caller for good (seen
    // as a flaky "hanging pool" test). A controller kept alive by its own pending timer
    // cannot be collected; the timer also covers reading the body after this returns.
    const timeout = new AbortController()
    setTimeout(
      () => timeout.abort(new DOMException('the memory service did not answer in time', 'TimeoutError')),
      opts.timeoutMs
    ).unref()
    return fetch(`${base}${path}`, {
      method,
      headers: {
        accept: 'application/json',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(opts.apiKey ? { authorization: `Token ${opts.apiKey}` } : {})
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: signal ? AbortSignal.any([timeout.signal, signal]) : timeout.signal
    })
  }

  async function readJson(res: Response): Promise<unknown> {
    try {
      return await res.json()
    } catch {
      return undefined
    }
  }

  /** The item, only if it belongs to this pool (another pool's id is "not found"). */
  async function ownItem(pool: PoolRef, id: string, failure: ApiError): Promise<Mem0Item | null> {
    let res: Response
    try {
      res = await call('GET', `/memories/${encodeURIComponent(id)}`)
    } catch {
      throw failure
    }
    if (res.status === 404) return null
    if (!res.ok) throw failure
    const item = (await readJson(res)) as Mem0Item | undefined
    if (!item || typeof item !== 'object') throw failure
    return item.user_id === mem0UserId(pool) ? item : null
  }

  return {
    name: 'http',

    async search(pool, query, limit) {
      let res: Response
      try {
        res = await call('POST', '/search', { query, user_id: mem0UserId(pool), limit: limit + 1 })
      } catch {
        throw upstreamFailed('search')
      }
      const list = res.ok ? listOf(await readJson(res)) : null
      if (!list) throw upstreamFailed('search')
      const mine = list.filter((i) => !i.user_id || i.user_id === mem0UserId(pool))
      // mem0 ranks by meaning itself (its own embeddings and vector store): its order and
      // score are kept as the semantic side; `mode` does not change what it does
      const items: SearchHit[] = mine.slice(0, limit).map((i) => ({
        id: i.id,
        content: text(i),
        score: typeof i.score === 'number' ? i.score : 0,
        scores: {
          fulltext: null,
          semantic: typeof i.score === 'number' ? i.score : null,
          fused: typeof i.score === 'number' ? i.score : 0
        },
        runId: meta(i, 'run_id'),
        rootRunId: meta(i, 'root_run_id'),
        createdAt: iso(i.created_at)
      }))
      return { items, truncated: mine.length > limit, mode: 'semantic' as const }
    },

    checkCursor: checkOffsetCursor,

    async browse(pool, limit, cursor) {
      if (cursor !== undefined) checkOffsetCursor(cursor)
      const offset = cursor === undefined ? 0 : Number(cursor)
      let res: Response
      try {
        res = await call('GET', `/memories?user_id=${encodeURIComponent(mem0UserId(pool))}`)
      } catch {
        throw upstreamFailed('listing')
      }
      const list = res.ok ? listOf(await readJson(res)) : null
      if (!list) throw upstreamFailed('listing')
      const mine = list.filter((i) => !i.user_id || i.user_id === mem0UserId(pool))
      mine.sort((a, b) => iso(b.created_at).localeCompare(iso(a.created_at)) || b.id.localeCompare(a.id))
      const page = mine.slice(offset, offset + limit)
      const items: BrowseItem[] = page.map((i) => ({
        id: i.id,
        content: text(i),
        background: false,
        sourceRunId: meta(i, 'run_id'),
        createdAt: iso(i.created_at),
        updatedAt: iso(i.updated_at ?? i.created_at)
      }))
      return { items, total: mine.length, nextCursor: offset + limit < mine.length ? String(offset + limit) : null }
    },

    async exists(pool, id) {
      return (await ownItem(pool, id, updateFailed('the memory service did not answer'))) !== null
    },

    async add(pool, content, changedBy) {
      const failed = upstreamFailed('write')
      let res: Response
      try {
        res = await call('POST', '/memories', {
          messages: [{ role: 'user', content }],
          user_id: mem0UserId(pool),
          infer: false,
          metadata: { source: 'cairn', added_by: changedBy }
        })
      } catch {
        throw failed
      }
      const list = res.ok ? listOf(await readJson(res)) : null
      const created = list?.[0]
      // mem0 answers no new item for a fact it already holds
      if (list && !created) throw conflict('the pool already holds this fact')
      if (!created) throw failed
      await recordChanges(db, pool, changedBy, [{ itemId: created.id, content, kind: 'created' }])
      const at = iso(created.created_at ?? new Date().toISOString())
      return {
        id: created.id,
        content: text(created) || content,
        background: false,
        sourceRunId: null,
        createdAt: at,
        updatedAt: at
      }
    },

    async update(pool, id, content, changedBy) {
      const failed = updateFailed()
      if (!(await ownItem(pool, id, failed))) return false
      let res: Response
      try {
        res = await call('PUT', `/memories/${encodeURIComponent(id)}`, { text: content })
      } catch {
        throw failed
      }
      if (!res.ok) throw failed
      await recordChanges(db, pool, changedBy, [{ itemId: id, content, kind: 'updated' }])
      return true
    },

    async remove(pool, id, changedBy) {
      const failed = deleteFailed()
      const item = await ownItem(pool, id, failed)
      if (!item) return 0
      let res: Response
      try {
        res = await call('DELETE', `/memories/${encodeURIComponent(id)}`)
      } catch {
        throw failed
      }
      if (res.status === 404) return 0
      if (!res.ok) throw failed
      await recordChanges(db, pool, changedBy, [{ itemId: id, content: text(item), kind: 'deleted' }])
      return 1
    },

    history(pool, id) {
      return readHistory(db, pool, id)
    },

    async deliver(pool, capture, markDelivered, signal) {
      let res: Response
      try {
        res = await call(
          'POST',
          '/memories',
          {
            messages: capture.facts.map((content) => ({ role: 'user', content })),
            user_id: mem0UserId(pool),
            infer: false,
            // lets the pool drop a redelivery of the same capture
            metadata: {
              capture_id: capture.captureId,
              run_id: capture.runId,
              root_run_id: capture.rootRunId,
              source: 'cairn'
            }
          },
          signal
        )
      } catch (err) {
        const name = (err as Error).name
        if (name === 'TimeoutError' || name === 'AbortError') {
          throw new PoolWriteError('the memory service did not answer in time; the write may have happened', {
            unknownOutcome: true
          })
        }
        throw new PoolWriteError(`the memory service is unreachable: ${(err as Error).message}`)
      }
      if (res.status >= 500) throw new PoolWriteError(`the memory service answered ${res.status}`)
      if (!res.ok)
        throw new PoolWriteError(`the memory service refused the capture (${res.status})`, { permanent: true })
      const body = await readJson(res)
      const list = listOf(body)
      if (body === undefined || (list === null && (typeof body !== 'object' || body === null))) {
        throw new PoolWriteError('the memory service answered something that is not a mem0 reply', { permanent: true })
      }
      const created = (list ?? []).map((i) => ({ itemId: i.id, content: text(i), kind: 'created' as const }))
      await recordChanges(db, pool, `run:${capture.runId}`, created)
      await markDelivered(db)
    }
  }
}

/** This backend's browse cursor is the offset of the page in the service's list. */
function checkOffsetCursor(cursor: string): void {
  if (!/^[1-9][0-9]{0,8}$/.test(cursor)) throw invalidCursor()
}
