// CONTRIBUTING.md's route index is written from the routes the app registers: `npm run
// docs:routes` rewrites the section, and test/routes.test.ts fails when it is stale. Each
// route's folder is the folder of the file that declared it (`app.routeTable`'s `source`), so
// a new route group appears in the index by registering its routes: nothing to keep by hand.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

export const CONTRIBUTING = 'CONTRIBUTING.md'
const HEADING = '## Route index\n'

/** What the index reads of a registered route (`RouteRecord` in src/route-table.ts). */
export interface IndexedRoute {
  url: string
  readonly source: string | undefined
}

export interface IndexRow {
  /** URL prefixes, each path parameter written `:id` */
  prefixes: string[]
  /** the folder that serves them, `src/runs/` */
  folder: string
  /** the files of that folder that declare their routes, or empty for a library's routes (`/docs`) */
  files: string[]
}

interface Node {
  children: Map<string, Node>
  /** the folders of the routes whose URL ends at this node (undefined: a library's route) */
  ending: Array<string | undefined>
  /** the folders of every route at or below this node */
  below: Array<string | undefined>
}

const node = (): Node => ({ children: new Map(), ending: [], below: [] })
const segmentsOf = (url: string): string[] =>
  url === '/'
    ? []
    : url
        .split('/')
        .slice(1)
        .map((segment) => (segment.startsWith(':') ? ':id' : segment))
const folderOf = (route: IndexedRoute): string | undefined =>
  route.source === undefined ? undefined : `${dirname(route.source)}/`

/** The folder most of these routes are served from (a library's routes count for none). */
function mostOf(folders: Array<string | undefined>): string | undefined {
  const counts = new Map<string, number>()
  for (const folder of folders) if (folder !== undefined) counts.set(folder, (counts.get(folder) ?? 0) + 1)
  return [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))[0]?.[0]
}

/**
 * The fewest prefixes that say which folder serves every route, the longest prefix that fits
 * a URL winning: every family (`/api/runs`, `/hub`) gets a row, and a longer prefix only where
 * another folder serves what is below it (`/api/runs/:id/approvals`).
 */
export function routeIndexRows(routes: readonly IndexedRoute[]): IndexRow[] {
  const root = node()
  for (const route of routes) {
    const folder = folderOf(route)
    let at = root
    at.below.push(folder)
    for (const segment of segmentsOf(route.url)) {
      let next = at.children.get(segment)
      if (!next) at.children.set(segment, (next = node()))
      at = next
      at.below.push(folder)
    }
    at.ending.push(folder)
  }
  const prefixes: Array<{ prefix: string; folder: string }> = []
  const visit = (at: Node, path: string[], inherited: string | undefined) => {
    const ending = [...new Set(at.ending.filter((f) => f !== undefined))]
    if (ending.length > 1)
      throw new Error(`/${path.join('/')} is served from ${ending.join(' and ')}: one URL, one folder`)
    // the root and /api are no family, and get a row only for a route of their own
    const above = path.length === 0 || (path.length === 1 && path[0] === 'api')
    const own = ending[0] ?? (above ? inherited : (mostOf(at.below) ?? inherited))
    // a family is the first segment of a URL (the second under /api): each gets a row of its own
    const family = !above && (path.length === 1 || path[0] === 'api') && path.length <= 2
    const row = above ? ending.length > 0 : family || own !== inherited
    if (own !== undefined && row) prefixes.push({ prefix: `/${path.join('/')}`, folder: own })
    for (const [segment, child] of at.children) visit(child, [...path, segment], own)
  }
  visit(root, [], undefined)

  const rows = new Map<string, IndexRow>()
  for (const { prefix, folder } of prefixes) {
    const row = rows.get(folder) ?? { prefixes: [], folder, files: [] }
    row.prefixes.push(prefix)
    rows.set(folder, row)
  }
  for (const route of routes) {
    const row = longestFit(prefixes, route.url)
    if (route.source === undefined || row === undefined) continue
    const files = rows.get(row.folder)!.files
    const file = relative(row.folder, route.source)
    if (!files.includes(file)) files.push(file)
  }
  return [...rows.values()]
}

/** Whether a route's URL starts with the prefix, segment by segment; a parameter matches a parameter of any name. */
export function fits(prefix: string, url: string): boolean {
  const want = segmentsOf(prefix)
  const have = segmentsOf(url)
  if (want.length === 0) return have.length === 0
  return want.length <= have.length && want.every((segment, i) => segment === have[i])
}

/** The row of the longest prefix that fits the URL. */
export function longestFit<Row extends { prefix: string }>(rows: readonly Row[], url: string): Row | undefined {
  return rows
    .filter((row) => fits(row.prefix, url))
    .sort((a, b) => segmentsOf(b.prefix).length - segmentsOf(a.prefix).length)[0]
}

/** The section's text, from below its heading to the next heading. */
export function routeIndexSection(routes: readonly IndexedRoute[]): string {
  const lines = routeIndexRows(routes).map(
    (row) =>
      `| ${row.prefixes.map((p) => `\`${p}\``).join(', ')} | \`${row.folder}\` | ${
        row.files.length > 0 ? row.files.map((f) => `\`${f}\``).join(', ') : "a library's"
      } |`
  )
  return `
Which folder serves a URL: the longest prefix that fits wins (\`:id\` stands for any path
parameter), and the files of that folder that declare its routes. It is written from the
routes the app registers (each route's folder is the one of the file that declared it), so a
new group appears here by registering its routes.

<!-- Written by \`npm run docs:routes\` from the routes the app registers: test/routes.test.ts fails while it is stale. -->

| URL prefix | Folder | Files |
| --- | --- | --- |
${lines.join('\n')}

`
}

/** The section as CONTRIBUTING.md has it now. */
export function writtenSection(text: string): string {
  const start = text.indexOf(HEADING)
  if (start < 0) throw new Error(`${CONTRIBUTING} has no "${HEADING.trim()}" heading`)
  const body = start + HEADING.length
  const end = text.indexOf('\n## ', body)
  return text.slice(body, end < 0 ? text.length : end + 1)
}

function withSection(text: string, section: string): string {
  const current = writtenSection(text)
  const body = text.indexOf(HEADING) + HEADING.length
  return `${text.slice(0, body)}${section}${text.slice(body + current.length)}`
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { buildApp } = await import('../src/app.js')
  const { testConfig } = await import('../src/config.js')
  // the app's routes as a test builds it, on a throwaway embedded database
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-route-index-'))
  try {
    const app = await buildApp({ config: testConfig({ DATA_DIR: dataDir }) })
    const section = routeIndexSection(app.routeTable)
    await app.close()
    writeFileSync(CONTRIBUTING, withSection(readFileSync(CONTRIBUTING, 'utf8'), section))
    process.stdout.write(`${CONTRIBUTING}: the route index written\n`)
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
  }
}
