// The console's one way to the server: the public API, same origin, the session cookie,
// and this page's release in `x-service-client-release` on every request.

/** The release of the server that served this page (plugins/hub.ts writes it in). */
const release = document.querySelector<HTMLMetaElement>('meta[name="cairn-release"]')?.content ?? ''
const releaseHeader: Record<string, string> = release !== '' && !release.includes('%') ? { 'x-service-client-release': release } : {}

export class ApiError extends Error {
  readonly status: number
  readonly code: string
  constructor(status: number, code: string, message: string) {
    super(message)
    this.status = status
    this.code = code
  }
}

const mismatchListeners = new Set<() => void>()
/** Called once the server says this page is older than it (409 frontend_release_mismatch). */
export function onReleaseMismatch(listener: () => void): () => void {
  mismatchListeners.add(listener)
  return () => mismatchListeners.delete(listener)
}

export async function api<T>(method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<T> {
  let res: Response
  try {
    res = await fetch(`/api${path}`, {
      method,
      credentials: 'same-origin',
      headers: {
        accept: 'application/json',
        ...releaseHeader,
        ...(body === undefined ? {} : { 'content-type': 'application/json' })
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
  } catch {
    throw new ApiError(0, 'network', 'The server could not be reached. Check your connection and try again.')
  }
  if (res.status === 204) return undefined as T
  let json: unknown = null
  try {
    json = await res.json()
  } catch {
    // a body that is not JSON: described by the status below
  }
  if (!res.ok) {
    const err = (json ?? {}) as { error?: string; message?: string }
    if (res.status === 409 && err.error === 'frontend_release_mismatch') for (const listener of mismatchListeners) listener()
    throw new ApiError(res.status, err.error ?? `http_${res.status}`, err.message ?? err.error ?? `The server answered ${res.status}.`)
  }
  return json as T
}

export const query = (params: Record<string, string | number | undefined | null>) => {
  const search = new URLSearchParams()
  for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== null && value !== '') search.set(key, String(value))
  const text = search.toString()
  return text === '' ? '' : `?${text}`
}

export type Scope = 'org' | 'personal'

export interface User { id: string; email: string; name: string }
export interface OrgSummary { id: string; name: string; slug: string; role: 'owner' | 'admin' | 'member' }
export interface SessionInfo { user: User; session: { expiresAt: string; activeOrganizationId: string | null }; organizations: OrgSummary[] }
export interface ClientConfig { release: string; allowDevOrg?: boolean }

export interface MemoryItem {
  id: string
  content: string
  background: boolean
  sourceScope: Scope
  sourceRunId: string | null
  createdAt: string
  updatedAt: string
}
export interface BrowseResult {
  enabled: boolean
  scope: Scope
  authed: boolean
  total: number
  failedClosed?: true
  items: MemoryItem[]
  nextCursor: string | null
}
export interface SearchItem {
  id: string
  content: string
  sourceScope: Scope
  score: number
  citation: { kind: 'memory'; id: string; runId: string | null; rootRunId: string | null; createdAt: string }
}
export interface SearchResult { enabled: boolean; scope: Scope; authed: boolean; truncated: boolean; latencyMs: number; failedClosed?: true; items: SearchItem[] }
export interface HistoryEntry { content: string; changedBy: string; changedAt: string; kind: 'created' | 'updated' | 'deleted' }

export const CAPTURE_STATES = ['pending', 'delivering', 'delivered', 'dead', 'discarded'] as const
export type CaptureState = (typeof CAPTURE_STATES)[number]
export interface Capture {
  runId: string
  rootRunId: string
  state: CaptureState
  attempts: number
  maxAttempts: number
  lastError: string | null
  itemCount: number
  createdAt: string
  updatedAt: string
  nextAttemptAt: string | null
  deliveredAt: string | null
  orphan?: true
}
export interface RecallFrame {
  id: string
  runId: string
  rootRunId: string
  scope: Scope
  query: string
  itemIds: string[]
  latencyMs: number
  createdAt: string
}
export interface Run {
  id: string
  rootRunId: string
  engine: string
  model: string | null
  prompt: string
  status: 'queued' | 'running' | 'requires_action' | 'succeeded' | 'failed' | 'cancelled'
  error: string | null
  output?: string | null
  createdAt: string
  finishedAt: string | null
}
export interface ThreadSummary { rootRunId: string; title: string; runCount: number; latestRunId: string; latestStatus: Run['status']; createdAt: string; updatedAt: string }
export interface ModelEntry { id: string; engine: string; providerId: string | null; default: boolean }
export interface Approval { id: string; runId: string; callId: string; tool: string; arguments: Record<string, unknown>; status: string; expiresAt: string }
export interface MemorySettings { enabled: boolean; extract: boolean; orgEnabled: boolean; backend: string }
