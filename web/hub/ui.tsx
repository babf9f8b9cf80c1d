// Shared pieces: links that stay in the page, the loading, empty and error states, and
// actions that send one write however often they are clicked.
import type { ComponentChildren } from 'preact'
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks'
import { ApiError } from './api.js'
import { BASE, navigate } from './router.js'

interface LinkProps {
  to: string
  children: ComponentChildren
  class?: string
  'aria-label'?: string
  'aria-current'?: 'page' | undefined
}

export function Link({ to, children, class: className, ...rest }: LinkProps) {
  const onClick = (event: MouseEvent) => {
    if (
      event.defaultPrevented ||
      event.button !== 0 ||
      event.metaKey ||
      event.ctrlKey ||
      event.shiftKey ||
      event.altKey
    )
      return
    event.preventDefault()
    navigate(to)
  }
  return (
    <a href={`${BASE}${to}`} class={className} onClick={onClick} {...rest}>
      {children}
    </a>
  )
}

export const shortId = (id: string) => id.slice(-8)

export function Time({ iso }: { iso: string | null }) {
  if (iso === null) return <span>—</span>
  const date = new Date(iso)
  return (
    <time dateTime={iso} title={iso}>
      {date.toLocaleString()}
    </time>
  )
}

export function RunLink({ runId }: { runId: string | null }) {
  if (runId === null) return <span class="muted">no run</span>
  return (
    <Link
      to={`/runs/${encodeURIComponent(runId)}`}
      class="run-link"
      aria-label={`run ${shortId(runId)}: live events of run ${runId}`}
    >
      run {shortId(runId)}
    </Link>
  )
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="state loading" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" />
      Loading {what}…
    </p>
  )
}

export function Empty({ children }: { children: ComponentChildren }) {
  return (
    <div class="state empty" role="status">
      {children}
    </div>
  )
}

export const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err))

export function ErrorBox({ error, retry }: { error: unknown; retry?: () => void }) {
  const code = error instanceof ApiError ? error.code : null
  const refused = error instanceof ApiError && error.status >= 400 && error.status < 500
  // the banner at the top says what to do (reload); here only that nothing changed
  if (code === 'frontend_release_mismatch')
    return (
      <p class="state notice" role="status">
        Not saved: this page is older than the server. Reload it to continue.
      </p>
    )
  return (
    <div class="state error" role="alert">
      <p>
        {/* a refusal says why in the server's words; only a failure has no reason to give */}
        {refused ? <strong>Not done:</strong> : <strong>Something went wrong.</strong>} {messageOf(error)}
        {code && code !== 'network' ? <span class="muted"> ({code})</span> : null}
      </p>
      {retry ? (
        <button type="button" class="secondary" onClick={retry}>
          Try again
        </button>
      ) : null}
    </div>
  )
}

export type Loaded<T> = { status: 'loading' } | { status: 'ok'; data: T } | { status: 'error'; error: unknown }

/**
 * Loads `fn()` whenever `key` changes; a stale answer (an older key) is dropped. With `keep`,
 * what was loaded stays on screen while the next answer is awaited (a conversation growing by
 * a turn keeps its place and the keyboard focus, instead of flashing "Loading…").
 */
export function useLoad<T>(key: string, fn: () => Promise<T>, { keep = false } = {}): [Loaded<T>, () => void] {
  const [state, setState] = useState<Loaded<T>>({ status: 'loading' })
  const [tick, setTick] = useState(0)
  const fnRef = useRef(fn)
  fnRef.current = fn
  // a layout effect runs as soon as the view is in the document, not after the next paint:
  // the request starts a frame sooner (on a thread page the identity and the thread each wait for one)
  useLayoutEffect(() => {
    let live = true
    setState((prev) => (keep && prev.status === 'ok' ? prev : { status: 'loading' }))
    fnRef.current().then(
      (data) => {
        if (live) setState({ status: 'ok', data })
      },
      (error: unknown) => {
        if (live) setState({ status: 'error', error })
      }
    )
    return () => {
      live = false
    }
  }, [key, tick])
  const reload = useCallback(() => setTick((n) => n + 1), [])
  return [state, reload]
}

/**
 * A write behind a button: while one is in flight every other call is dropped (a double
 * click sends one request), synchronously, before any re-render could disable the button.
 */
export function useAction<A extends unknown[]>(
  fn: (...args: A) => Promise<void>
): { run: (...args: A) => void; pending: boolean; error: unknown } {
  const busy = useRef(false)
  const mounted = useRef(true)
  const [pending, setPending] = useState(false)
  const [error, setError] = useState<unknown>(null)
  useEffect(
    () => () => {
      mounted.current = false
    },
    []
  )
  const run = (...args: A) => {
    if (busy.current) return
    busy.current = true
    setPending(true)
    setError(null)
    fn(...args).then(
      () => {
        busy.current = false
        if (mounted.current) setPending(false)
      },
      (err: unknown) => {
        busy.current = false
        if (mounted.current) {
          setPending(false)
          setError(err)
        }
      }
    )
  }
  return { run, pending, error }
}

export function ScopePicker({
  scope,
  onChange
}: {
  scope: 'org' | 'personal'
  onChange: (scope: 'org' | 'personal') => void
}) {
  return (
    <fieldset class="scope">
      <legend>Pool</legend>
      <label>
        <input type="radio" name="scope" value="org" checked={scope === 'org'} onChange={() => onChange('org')} />{' '}
        Organization
      </label>
      <label>
        <input
          type="radio"
          name="scope"
          value="personal"
          checked={scope === 'personal'}
          onChange={() => onChange('personal')}
        />{' '}
        Personal
      </label>
    </fieldset>
  )
}

/** Why the personal pool shows nothing: it belongs to a signed-in person, and nobody is. */
export function PersonalUnavailable() {
  return (
    <div class="state notice" role="status">
      <p>
        <strong>Your personal pool is unavailable: nobody is signed in.</strong>
      </p>
      <p>
        A personal pool belongs to one signed-in person. You are using the shared dev organization on this machine (or
        an API key), which has no person behind it, so Cairn shows no personal memory and accepts no change to it.{' '}
        <Link to="/sign-in">Sign in</Link> to see and correct yours.
      </p>
    </div>
  )
}

export function MemoryOff() {
  return (
    <div class="state notice" role="status">
      <p>
        <strong>Memory is off for this organization.</strong> Nothing is captured or recalled and there is no pool to
        show. An owner or admin can turn it on in <Link to="/settings">Settings</Link>.
      </p>
    </div>
  )
}

/** A cursor pager back to the newest page or on to older ones. */
export function NewestOlder({
  cursor,
  next,
  onChange
}: {
  cursor: string | undefined
  next: string | null | undefined
  onChange: (cursor: string | undefined) => void
}) {
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" class="secondary" disabled={cursor === undefined} onClick={() => onChange(undefined)}>
        ← Newest
      </button>
      <button
        type="button"
        class="secondary"
        disabled={next === null || next === undefined}
        onClick={() => onChange(next ?? undefined)}
      >
        Older →
      </button>
    </nav>
  )
}
