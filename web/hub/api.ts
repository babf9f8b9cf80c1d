// The console's one way to the server: the public API, same origin, the session cookie,
// and this page's release in `x-service-client-release` on every request.
import type { Static } from 'typebox'
import type { OrganizationSummary, SessionReply, User as UserSchema, WhoAmIReply } from '../../schemas/auth.js'
import type {
  AddItemResponse,
  BrowseItem,
  BrowseResponse,
  Capture as CaptureSchema,
  CaptureStateName,
  CapturesResponse,
  HistoryResponse,
  Recall,
  RecallsResponse,
  SearchItem as SearchItemSchema,
  SearchResponse,
  Settings
} from '../../schemas/memory.js'
import type { ModelEntry as ModelEntrySchema, ModelList } from '../../schemas/providers.js'
import type {
  Run as RunSchema,
  RunEnvelope,
  RunEvent,
  Thread as ThreadSchema,
  ThreadDetail,
  ThreadPage
} from '../../schemas/runs.js'
import type { Approval as ApprovalSchema, ApprovalPage } from '../../schemas/runtime.js'

/** The release of the server that served this page (plugins/hub.ts writes it in). */
const release = document.querySelector<HTMLMetaElement>('meta[name="cairn-release"]')?.content ?? ''
const releaseHeader: Record<string, string> =
  release !== '' && !release.includes('%') ? { 'x-service-client-release': release } : {}

/** One problem a `400 validation_failed` names: where (a JSON path; a SKILL.md's line and column too) and what. */
export interface ErrorDetail {
  path: string
  message: string
  line?: number
  column?: number
}

export class ApiError extends Error {
  readonly status: number
  readonly code: string
  readonly details: ErrorDetail[]
  constructor(status: number, code: string, message: string, details: ErrorDetail[] = []) {
    super(message)
    this.status = status
    this.code = code
    this.details = details
  }
}

const mismatchListeners = new Set<() => void>()
/** Called once the server says this page is older than it (409 frontend_release_mismatch). */
export function onReleaseMismatch(listener: () => void): () => void {
  mismatchListeners.add(listener)
  return () => mismatchListeners.delete(listener)
}

export async function api<T>(
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
  path: string,
  body?: unknown
): Promise<T> {
  let res: Response
  // a file goes as multipart (the browser writes its content type and boundary); anything else as JSON
  const form = body instanceof FormData
  try {
    res = await fetch(`/api${path}`, {
      method,
      credentials: 'same-origin',
      headers: {
        accept: 'application/json',
        ...releaseHeader,
        ...(body === undefined || form ? {} : { 'content-type': 'application/json' })
      },
      ...(body === undefined ? {} : { body: form ? body : JSON.stringify(body) })
    })
  } catch {
    throw new ApiError(0, 'network', 'The server could not be reached. Check your connection and try again.')
  }
  if (res.status === 204) return undefined as T
  // a file the API answers with (a skill's SKILL.md): its text
  if (res.ok && !(res.headers.get('content-type') ?? '').includes('json')) return (await res.text()) as T
  let json: unknown = null
  try {
    json = await res.json()
  } catch {
    // a body that is not JSON: described by the status below
  }
  if (!res.ok) {
    const err = (json ?? {}) as { error?: string; message?: string; details?: ErrorDetail[] }
    if (res.status === 409 && err.error === 'frontend_release_mismatch')
      for (const listener of mismatchListeners) listener()
    throw new ApiError(
      res.status,
      err.error ?? `http_${res.status}`,
      err.message ?? err.error ?? `The server answered ${res.status}.`,
      Array.isArray(err.details) ? err.details : []
    )
  }
  return json as T
}

export const query = (params: Record<string, string | number | undefined | null>) => {
  const search = new URLSearchParams()
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value))
  const text = search.toString()
  return text === '' ? '' : `?${text}`
}

// The wire types are the server's own TypeBox schemas (schemas/), imported for their types
// only: `import type` is erased by the build, so no TypeBox code reaches the bundle.
export type Scope = Static<typeof BrowseResponse>['scope']

export type User = Static<typeof UserSchema>
export type OrgSummary = Static<typeof OrganizationSummary>
export type SessionInfo = Static<typeof SessionReply>
/** GET /api/auth/whoami: who this browser acts as, 200 with or without a session. */
export type WhoAmI = Static<typeof WhoAmIReply>

export type MemoryItem = Static<typeof BrowseItem>
export type BrowseResult = Static<typeof BrowseResponse>
export type SearchItem = Static<typeof SearchItemSchema>
export type SearchResult = Static<typeof SearchResponse>
export type MemoryHistory = Static<typeof HistoryResponse>
export type HistoryEntry = MemoryHistory['history'][number]
export type MemorySettings = Static<typeof Settings>
export type AddedItem = Static<typeof AddItemResponse>

export type CaptureState = Static<typeof CaptureStateName>
/**
 * The capture states the outbox filters by: a value the page needs, so listed here, and held to the server's list
 * (schemas/memory.ts) both ways: a state the server does not know, or one of its states missing here, fails the build.
 */
export const CAPTURE_STATES = [
  'pending',
  'delivering',
  'delivered',
  'dead',
  'discarded'
] as const satisfies readonly CaptureState[]
const everyState: Exclude<CaptureState, (typeof CAPTURE_STATES)[number]> extends never ? true : never = true
void everyState
export type Capture = Static<typeof CaptureSchema>
export type CaptureList = Static<typeof CapturesResponse>
export type RecallFrame = Static<typeof Recall>
export type Recalls = Static<typeof RecallsResponse>

export type Run = Static<typeof RunSchema>
export type RunReply = Static<typeof RunEnvelope>
/** One `data:` line of a run's or a thread's event stream. */
export type RunEventFrame = Static<typeof RunEvent>
export type ThreadSummary = Static<typeof ThreadSchema>
export type ThreadList = Static<typeof ThreadPage>
export type ThreadWithRuns = Static<typeof ThreadDetail>
export type ModelEntry = Static<typeof ModelEntrySchema>
export type Models = Static<typeof ModelList>
export type Approval = Static<typeof ApprovalSchema>
export type Approvals = Static<typeof ApprovalPage>
