/**
 * Repository wiki: which pages a repository gets (its README and top-level
 * files, each document under docs/, each top-level folder of sources), and the offline
 * text of a page (an outline of the files it cites, the same for the same files).
 */

/** A file of the repository's tree at the built commit. */
export interface TreeFile {
  path: string
  /** the blob SHA: a file whose SHA is unchanged is unchanged */
  sha: string
  size: number
}

export interface PagePlan {
  /** the page's place in the wiki (and its record's `source.path`): a file or `folder/` */
  path: string
  title: string
  files: TreeFile[]
}

/** At most this many document pages, folder pages and cited files per page. */
export const MAX_DOC_PAGES = 40
export const MAX_FOLDER_PAGES = 15
export const MAX_FILES_PER_PAGE = 20
/** Files larger than this are cited but not read (their outline says so). */
export const MAX_FILE_BYTES = 200_000

const DOC_EXTENSIONS = new Set(['md', 'markdown', 'mdx', 'rst', 'txt', 'adoc'])
const SOURCE_EXTENSIONS = new Set([
  'ts',
  'tsx',
  'mts',
  'cts',
  'js',
  'jsx',
  'mjs',
  'cjs',
  'py',
  'go',
  'rs',
  'java',
  'kt',
  'kts',
  'rb',
  'php',
  'c',
  'h',
  'cc',
  'cpp',
  'hpp',
  'cs',
  'swift',
  'scala',
  'sh',
  'bash',
  'sql',
  'ex',
  'exs',
  'erl',
  'hs',
  'ml',
  'clj',
  'lua',
  'r',
  'jl',
  'dart',
  'vue',
  'svelte',
  'zig',
  'nim'
])
/** Top-level files that describe a project, whatever their extension. */
const MANIFESTS = new Set([
  'package.json',
  'go.mod',
  'cargo.toml',
  'pyproject.toml',
  'setup.py',
  'setup.cfg',
  'requirements.txt',
  'gemfile',
  'pom.xml',
  'build.gradle',
  'build.gradle.kts',
  'composer.json',
  'makefile',
  'dockerfile',
  'cmakelists.txt',
  'deno.json',
  'mix.exs'
])
/** Top-level folders that hold no sources worth a page. */
const SKIPPED_FOLDERS = new Set([
  'node_modules',
  'vendor',
  'dist',
  'build',
  'out',
  'target',
  'coverage',
  'third_party',
  'docs',
  'doc'
])

const extensionOf = (path: string) => {
  const name = path.slice(path.lastIndexOf('/') + 1)
  const dot = name.lastIndexOf('.')
  return dot > 0 ? name.slice(dot + 1).toLowerCase() : ''
}
const byPath = (a: { path: string }, b: { path: string }) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)
const isReadme = (path: string) => /^readme(\.[A-Za-z0-9]+)?$/i.test(path)
const isSource = (path: string) => SOURCE_EXTENSIONS.has(extensionOf(path))

/**
 * The pages of a repository's wiki, in order: the overview (the README and the top-level
 * sources and manifests), one page per document under `docs/` (or `doc/`), one page per
 * top-level folder with sources directly in it. Hidden files and folders are left out.
 */
export function planPages(repo: string, tree: TreeFile[]): PagePlan[] {
  const files = tree.filter((f) => !f.path.split('/').some((part) => part.startsWith('.'))).sort(byPath)
  const top = files.filter((f) => !f.path.includes('/'))
  const pages: PagePlan[] = []

  const readme = top
    .filter((f) => isReadme(f.path))
    .sort((a, b) => Number(extensionOf(b.path) === 'md') - Number(extensionOf(a.path) === 'md') || byPath(a, b))[0]
  const rootFiles = top
    .filter((f) => f !== readme && (isSource(f.path) || MANIFESTS.has(f.path.toLowerCase())))
    .slice(0, MAX_FILES_PER_PAGE - 1)
  const overview = [...(readme ? [readme] : []), ...rootFiles]
  if (overview.length > 0) pages.push({ path: readme?.path ?? '/', title: `${repo}: overview`, files: overview })

  const docs = files
    .filter((f) => /^docs?\//i.test(f.path) && DOC_EXTENSIONS.has(extensionOf(f.path)))
    .slice(0, MAX_DOC_PAGES)
  for (const doc of docs) pages.push({ path: doc.path, title: `${repo}: ${doc.path}`, files: [doc] })

  const folders = new Map<string, TreeFile[]>()
  for (const f of files) {
    const parts = f.path.split('/')
    if (parts.length !== 2 || SKIPPED_FOLDERS.has(parts[0]!.toLowerCase()) || !isSource(f.path)) continue
    const list = folders.get(parts[0]!) ?? []
    list.push(f)
    folders.set(parts[0]!, list)
  }
  for (const [folder, list] of [...folders].slice(0, MAX_FOLDER_PAGES)) {
    pages.push({ path: `${folder}/`, title: `${repo}: ${folder}/`, files: list.slice(0, MAX_FILES_PER_PAGE) })
  }
  return pages
}

/** The cited files as `path -> blob SHA`: what decides whether a page is rewritten. */
export const citedOf = (page: PagePlan): Record<string, string> =>
  Object.fromEntries(page.files.map((f) => [f.path, f.sha]))

export function sameCited(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k])
}

/** A file's text, or null when it was too large (or not text) to read. */
export interface FileText {
  file: TreeFile
  text: string | null
}

/** A fence longer than any run of backticks in the text, so the text cannot close it. */
function fenceFor(text: string): string {
  const longest = Math.max(0, ...[...text.matchAll(/`+/g)].map((m) => m[0].length))
  return '`'.repeat(Math.max(3, longest + 1))
}

const cut = (line: string, max = 160) => ([...line].length > max ? `${[...line].slice(0, max).join('')}…` : line)

/** Headings of a Markdown text (outside code fences), as a nested list. */
function markdownOutline(text: string): string[] {
  const out: string[] = []
  let fenced = false
  for (const line of text.split(/\r?\n/)) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    if (fenced) continue
    const heading = /^(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading && heading[2]) out.push(`${'  '.repeat(heading[1]!.length - 1)}- ${cut(heading[2])}`)
  }
  return out.slice(0, 60)
}

/** Lines of code that declare something at the top level (functions, classes, types, exports). */
const DECLARATION =
  /^(export\s|pub(\([^)]*\))?\s|public\s|def\s|async\s+def\s|class\s|func\s|fn\s|function\s|async\s+function\s|interface\s|type\s|struct\s|enum\s|trait\s|impl[\s<]|module\s|package\s|const\s+[A-Za-z_$][\w$]*\s*=|abstract\s|final\s|object\s|data\s+class\s)/

function codeOutline(text: string): string[] {
  return text
    .split(/\r?\n/)
    .filter((line) => DECLARATION.test(line))
    .map((line) => cut(line.trimEnd().replace(/\s*\{\s*$/, '')))
    .slice(0, 40)
}

function jsonOutline(text: string): string[] {
  try {
    const value = JSON.parse(text) as unknown
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return []
    return Object.keys(value)
      .slice(0, 40)
      .map((key) => `- \`${key.replace(/`/g, "'")}\``)
  } catch {
    return []
  }
}

/** One file's part of an outline page: its path, its size, and its structure. */
export function outlineFile({ file, text }: FileText): string {
  const head = `## ${file.path}`
  if (text === null) return `${head}\n\n${file.size} bytes, not outlined (too large or not text).`
  const lines = text === '' ? 0 : text.split(/\r?\n/).length - (text.endsWith('\n') ? 1 : 0)
  const size = `${lines} ${lines === 1 ? 'line' : 'lines'}, ${file.size} bytes.`
  const ext = extensionOf(file.path)
  if (DOC_EXTENSIONS.has(ext)) {
    const headings = ext === 'md' || ext === 'markdown' || ext === 'mdx' ? markdownOutline(text) : []
    if (headings.length > 0) return `${head}\n\n${size} Sections:\n\n${headings.join('\n')}`
    const opening = text
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter(Boolean)
      .slice(0, 3)
      .map((l) => `> ${cut(l)}`)
    return opening.length > 0 ? `${head}\n\n${size} It opens:\n\n${opening.join('\n')}` : `${head}\n\n${size}`
  }
  if (ext === 'json') {
    const keys = jsonOutline(text)
    return keys.length > 0 ? `${head}\n\n${size} Top-level keys:\n\n${keys.join('\n')}` : `${head}\n\n${size}`
  }
  const declarations = codeOutline(text)
  if (declarations.length === 0) return `${head}\n\n${size}`
  const block = declarations.join('\n')
  const fence = fenceFor(block)
  return `${head}\n\n${size} Declarations:\n\n${fence}\n${block}\n${fence}`
}

/** The offline page (the `echo` engine's): a deterministic outline of the files it cites. */
export function outlinePage(repo: string, commit: string, page: PagePlan, texts: FileText[]): string {
  return (
    [
      `# ${page.title}`,
      `An outline of ${texts.length === 1 ? 'one file' : `${texts.length} files`} of \`${repo}\` at commit \`${commit.slice(0, 12)}\`.`,
      ...texts.map(outlineFile)
    ].join('\n\n') + '\n'
  )
}

/** The footer of a page a model wrote: the files it was given. */
export function sourcesFooter(repo: string, commit: string, page: PagePlan): string {
  return `\n\n---\n\nWritten from \`${repo}\` at commit \`${commit.slice(0, 12)}\`: ${page.files.map((f) => `\`${f.path}\``).join(', ')}.\n`
}

/** How much of each file a model is given, and of all of them together. */
const MODEL_FILE_CHARS = 20_000
const MODEL_PAGE_CHARS = 60_000

export const WIKI_SYSTEM_PROMPT = [
  'You write one page of an internal wiki about a code repository, in Markdown.',
  'Start with a level-1 heading that is the page title you are given.',
  'Explain what the files are for and how they fit together, for a developer new to the project.',
  'Use only what the files show; never invent APIs, options or behaviour. Do not repeat whole files.'
].join(' ')

/** What a model is asked for one page: the files, cut to a budget. */
export function pagePrompt(repo: string, commit: string, page: PagePlan, texts: FileText[]): string {
  let budget = MODEL_PAGE_CHARS
  const parts = [`Repository ${repo} at commit ${commit}. Page title: ${page.title}.`, 'Files:']
  for (const { file, text } of texts) {
    if (text === null) {
      parts.push(`### ${file.path}\n\n(${file.size} bytes, not shown)`)
      continue
    }
    const shown = text.slice(0, Math.max(0, Math.min(MODEL_FILE_CHARS, budget)))
    budget -= shown.length
    const fence = fenceFor(shown)
    parts.push(`### ${file.path}${shown.length < text.length ? ' (cut short)' : ''}\n\n${fence}\n${shown}\n${fence}`)
  }
  return parts.join('\n\n')
}
