import { relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyContextConfig, FastifyInstance } from 'fastify'

/** One registered route, as the route-walk tests, the route index and the API-key allowlist see it. */
export interface RouteRecord {
  method: string
  url: string
  config: FastifyContextConfig
  /** a WebSocket route (@fastify/websocket), answered by an upgrade */
  websocket: boolean
  /**
   * The project file that declared the route (`src/runs/index.ts`), or undefined for a
   * library's own routes: read from the call stack kept when it was registered, which V8
   * formats only when this is first read (the route index).
   */
  readonly source: string | undefined
}

declare module 'fastify' {
  interface FastifyInstance {
    routeTable: readonly RouteRecord[]
  }
}

const PROJECT_ROOT = fileURLToPath(new URL('..', import.meta.url))

/** The first frame of a call stack that is a project file outside node_modules, relative to the project. */
function projectFileOf(stack: string): string | undefined {
  for (const line of stack.split('\n').slice(1)) {
    const location = /\(?((?:file:\/\/)?\/[^()]+?):\d+:\d+\)?$/.exec(line.trim())?.[1]
    if (location === undefined) continue
    const file = location.startsWith('file://') ? fileURLToPath(location) : location
    if (file.startsWith(PROJECT_ROOT) && !file.includes('/node_modules/')) return relative(PROJECT_ROOT, file)
  }
  return undefined
}

/** Decorates `app.routeTable` with every route registered from now on (before any route is). */
export function recordRoutes(app: FastifyInstance): void {
  const routes: RouteRecord[] = []
  app.decorate('routeTable', routes)
  app.addHook('onRoute', function recordRoute(route) {
    // the stack is captured now and formatted (costly, with source maps) only if read
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 50
    const site: { stack?: string } = {}
    Error.captureStackTrace(site, recordRoute)
    Error.stackTraceLimit = limit
    let source: { file: string | undefined } | undefined
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    for (const method of methods) {
      routes.push({
        method,
        url: route.url,
        config: route.config ?? {},
        websocket: Boolean((route as { websocket?: boolean }).websocket),
        get source() {
          return (source ??= { file: projectFileOf(site.stack ?? '') }).file
        }
      })
    }
  })
}
