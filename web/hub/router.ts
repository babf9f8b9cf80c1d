// A small history router: every page of the console lives under /hub/, and the server
// answers each of those paths with the same page (plugins/hub.ts).
import { useEffect, useState } from 'preact/hooks'

export const BASE = '/hub'

export interface Location {
  path: string
  params: URLSearchParams
}

const current = (): Location => ({
  path: location.pathname.startsWith(`${BASE}/`) ? location.pathname.slice(BASE.length) : '/',
  params: new URLSearchParams(location.search)
})

const listeners = new Set<() => void>()

/** Goes to `to` (a path under /hub, such as `/search?q=x`) without reloading the page. */
export function navigate(to: string, { replace = false } = {}): void {
  const url = `${BASE}${to}`
  if (replace) history.replaceState(null, '', url)
  else history.pushState(null, '', url)
  for (const listener of listeners) listener()
}

export function useLocation(): Location {
  const [loc, setLoc] = useState(current)
  useEffect(() => {
    const update = () => setLoc(current())
    listeners.add(update)
    addEventListener('popstate', update)
    return () => {
      listeners.delete(update)
      removeEventListener('popstate', update)
    }
  }, [])
  return loc
}

/** `/items/:id` against `/items/abc` → `{id: 'abc'}`, or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const want = pattern.split('/')
  const got = path.split('/')
  if (want.length !== got.length) return null
  const params: Record<string, string> = {}
  for (let i = 0; i < want.length; i++) {
    const w = want[i]!
    const g = got[i]!
    if (w.startsWith(':')) {
      if (g === '') return null
      params[w.slice(1)] = decodeURIComponent(g)
    } else if (w !== g) return null
  }
  return params
}
