/**
 * Everything an API key may reach (spec section 5, contract 2.3), in one list. A key is
 * deny-by-default: a route not listed here answers a key `401 unauthorized` (the key
 * lane never falls back to the session). Entries are `METHOD /api/route/pattern` as the
 * route is registered (`request.routeOptions.url`), never the raw URL; parameter names do
 * not matter (`/api/runs/:id` and `/api/runs/:runId` are the same entry). HEAD follows GET.
 *
 * Adding a route? Put it in KEY_ALLOWLIST only if an integration needs it and it is run
 * dispatch, a decision on a run's tool call, or a read path; otherwise in KEY_DENYLIST. test/routes.test.ts fails on a
 * non-public route that is in neither list, and calls every route with a key to check
 * that it answers as listed.
 */
export const KEY_ALLOWLIST: readonly string[] = [
  // run dispatch
  'POST /api/runs',
  'POST /api/runs/:id/cancel',
  'POST /api/skills/:id/run',
  'POST /api/playbooks/:id/run',
  // runs and threads
  'GET /api/runs',
  'GET /api/runs/:id',
  'GET /api/runs/changes',
  'GET /api/runs/:id/events',
  'GET /api/runs/:id/messages',
  'GET /api/runs/:rootRunId/thread-events',
  'GET /api/threads',
  'GET /api/threads/:rootRunId',
  // a run's tool calls waiting for a decision: an integration acting for the org lists and
  // decides them (recorded as the key), as the org's owners and admins may
  'GET /api/runs/:id/approvals',
  'POST /api/runs/:id/approvals/:approvalId',
  // artifacts
  'GET /api/artifacts',
  'GET /api/artifacts/:id',
  'GET /api/artifacts/:id/content',
  // knowledge
  'GET /api/knowledge',
  'GET /api/knowledge/search',
  'GET /api/knowledge/:id',
  // skills, tasks, projects
  'GET /api/skills',
  'GET /api/skills/:id',
  'GET /api/skills/:id/skill.md',
  'GET /api/playbooks',
  'GET /api/playbooks/:id',
  'GET /api/tasks',
  'GET /api/tasks/:id',
  'GET /api/projects',
  'GET /api/projects/:id',
  // automations (contract 10: key reads); a trigger starts a run but is not marked key
  'GET /api/automations',
  'GET /api/automations/:id',
  'GET /api/automations/:id/fires',
  // platform (contract 11): the models a run may name
  'GET /api/models',
  'GET /api/models/default',
  'GET /api/models/embedding',
  // GitHub reads (contract 11)
  'GET /api/github/repos',
  'GET /api/github/repos/:owner/:repo/pulls',
  // memory hub reads
  'GET /api/memory/search',
  'GET /api/memory/browse',
  'GET /api/memory/captures',
  'GET /api/memory/recalls',
  // Cairn as an MCP server: its tools read and dispatch as the routes above do
  'POST /api/mcp',
  'GET /api/mcp',
  'DELETE /api/mcp'
]

/**
 * Routes a key may deliberately not reach. `*` as the method means any method, and a
 * pattern ending in `/*` covers everything below it. Keys never write except the
 * dispatch and the tool-call decision above, so every other write is denied wholesale;
 * every other read must be named here on purpose.
 */
export const KEY_DENYLIST: readonly string[] = [
  'POST /api/*',
  'PUT /api/*',
  'PATCH /api/*',
  'DELETE /api/*',
  // minting and listing keys: session-only and admin-only (mint/revoke answer 403 session_required)
  'GET /api/keys',
  // the agent runtime: terminal and desktop are for people with a session; tool policies
  // are org configuration, not a read path an integration needs
  'GET /api/tools/policies',
  'GET /api/runs/:id/terminal',
  'GET /api/desktop-proxy/:threadId/websockify',
  // memory: keys read search, browse, captures and recalls (above); item history and the
  // org's memory settings are for people
  'GET /api/memory/item/:id/history',
  'GET /api/memory/settings',
  // artifacts: keys read artifacts and their current content (above); uploads, old
  // versions and proposals are the people's workbench (contract 7 marks none of them key)
  'GET /api/uploads',
  'GET /api/uploads/:id',
  'GET /api/uploads/:id/content',
  'GET /api/artifacts/:id/versions',
  'GET /api/artifacts/:id/versions/:version/content',
  'GET /api/artifacts/:id/proposals',
  'GET /api/artifacts/:id/proposals/:pid/diff',
  // knowledge: keys read records and search (above); a record's history, documents and the
  // learning lane's drafts are the people's workbench (contract 8 marks none of them key)
  'GET /api/knowledge/:id/history',
  'GET /api/knowledge/documents',
  'GET /api/knowledge/documents/:id',
  'GET /api/knowledge/documents/:id/chunks',
  'GET /api/knowledge/drafts',
  // skills: keys read skills and playbooks and run them (above); proposals are the people's
  // learning lane, and a task run changes the board (contract 9 marks neither key)
  'GET /api/skills/proposals',
  // secrets: admin only, and never for a key (contract 10)
  'GET /api/secrets',
  // integrations (contract 11): reading them is an org route, not marked key
  'GET /api/integrations',
  // provider connections: org configuration, not a read path an integration needs (contract 11 marks only GET
  // /api/models key)
  'GET /api/providers',
  // the dashboard and fleet usage are for people (contract 11 marks neither key)
  'GET /api/dashboard',
  'GET /api/usage',
  // the org's MCP servers: org configuration, not a read path an integration needs
  'GET /api/mcp-servers'
]

/** `METHOD /pattern` with parameter names erased and HEAD read as GET. */
export function normalizeRoute(method: string, url: string): string {
  const m = method.toUpperCase() === 'HEAD' ? 'GET' : method.toUpperCase()
  return `${m} ${url.replace(/:[A-Za-z0-9_]+(\([^)]*\))?/g, ':')}`
}

const allowed = new Set(
  KEY_ALLOWLIST.map((entry) => {
    const [method, url] = entry.split(' ') as [string, string]
    return normalizeRoute(method, url)
  })
)

interface DenyRule {
  method: string
  exact: string | null
  prefix: string | null
}

const denied: DenyRule[] = KEY_DENYLIST.map((entry) => {
  const [method, url] = entry.split(' ') as [string, string]
  const pattern = normalizeRoute('GET', url).slice(4)
  return pattern.endsWith('/*')
    ? { method: method.toUpperCase(), exact: null, prefix: pattern.slice(0, -1) }
    : { method: method.toUpperCase(), exact: pattern, prefix: null }
})

const decided = new Map<string, boolean>()

/** May an API key call this registered route? (memoized: the set of registered routes is finite) */
export function keyMayReach(method: string, routeUrl: string): boolean {
  const id = `${method} ${routeUrl}`
  let answer = decided.get(id)
  if (answer === undefined) {
    answer = allowed.has(normalizeRoute(method, routeUrl))
    if (decided.size < 10_000) decided.set(id, answer)
  }
  return answer
}

/** Is this route on the deny list on purpose? (For the route walk; the lane itself denies anything not allowed.) */
export function keyDeniedOnPurpose(method: string, routeUrl: string): boolean {
  const [m, url] = normalizeRoute(method, routeUrl).split(' ') as [string, string]
  return denied.some(
    (rule) =>
      (rule.method === '*' || rule.method === m) &&
      (rule.exact !== null ? rule.exact === url : url.startsWith(rule.prefix!))
  )
}
