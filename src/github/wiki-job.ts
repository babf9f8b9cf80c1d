import { ApiError } from '../../plugins/errors.js'
import type { Db } from '../db/client.js'
import { EngineError, type Engine, type EngineContext, type EngineResult } from '../runs/engines/types.js'
import type { JobRunRef, RunJobs } from '../runs/ports/jobs.js'
import type { GitHubApi } from './client.js'
import {
  deleteWikiPage,
  getWikiPage,
  getWikiRun,
  listWikiPages,
  lockWiki,
  putWikiPage,
  type WikiRunRow
} from './github-repo.js'
import type { WikiPageText, WikiRecords } from './ports.js'
import type { GitHubSession } from './session.js'
import {
  citedOf,
  MAX_FILE_BYTES,
  outlinePage,
  pagePrompt,
  planPages,
  sameCited,
  sourcesFooter,
  WIKI_SYSTEM_PROMPT,
  type FileText,
  type PagePlan,
  type TreeFile
} from './wiki.js'

export interface WikiJobDeps {
  db: Db
  /** the org's GitHub session for this run (its requests end with the run's signal) */
  session(orgId: string, signal: AbortSignal): Promise<GitHubSession>
  records: WikiRecords
}

/** The tag of every page of a repository's wiki. */
export const wikiTag = (repo: string) => `wiki:${repo}`

/** Files read at once while a page is written. */
const READ_CONCURRENCY = 4

type PageOutcome = 'created' | 'updated' | 'unchanged' | 'removed'

/**
 * Repo wiki as a job of the runs group: a run whose metadata names a wiki
 * and which POST /api/knowledge/wiki recorded (github_wiki_runs) builds the wiki of that
 * repository at that commit instead of answering its prompt.
 */
export function wikiJobs(deps: WikiJobDeps): RunJobs {
  return {
    async jobOf(run) {
      const wiki = run.metadata.wiki
      if (wiki === null || typeof wiki !== 'object') return null
      const job = await getWikiRun(deps.db, run.orgId, run.id)
      return job ? { run: (ctx, engine) => buildWiki(deps, run, job, ctx, engine) } : null
    }
  }
}

/** A GitHub failure fails the run with the contract's sentence (rate limit, revoked token, ...). */
async function upstream<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (err) {
    if (err instanceof ApiError) throw new EngineError(err.message)
    throw err
  }
}

/**
 * Reads the tree at the run's commit, plans the pages, and writes each page whose cited
 * files changed (by blob SHA) since it was last written, or that is new; the others keep
 * their version. Pages whose files are gone are deleted. Each page commits on its own, so a
 * build cut short (a rate limit, a cancel) keeps what it wrote, and the next build does
 * only the rest.
 */
async function buildWiki(
  deps: WikiJobDeps,
  run: JobRunRef,
  job: WikiRunRow,
  ctx: EngineContext,
  engine: Engine
): Promise<EngineResult> {
  const { db, records } = deps
  const [owner, repo] = job.repo.split('/') as [string, string]
  const short = job.commit.slice(0, 12)
  const session = await upstream(() => deps.session(run.orgId, ctx.signal))
  const tree = await upstream(() =>
    session.call(`the tree of ${job.repo} at ${short}`, `GitHub has no commit ${short} in ${job.repo}`, (api) =>
      api.rest.git.getTree({ owner, repo, tree_sha: job.commit, recursive: '1' })
    )
  )
  const files: TreeFile[] = tree.data.tree
    .filter((e) => e.type === 'blob' && typeof e.path === 'string' && typeof e.sha === 'string')
    .map((e) => ({ path: e.path!, sha: e.sha!, size: e.size ?? 0 }))
  const plan = planPages(job.repo, files)
  const existing = new Map((await listWikiPages(db, run.orgId, job.repo)).map((p) => [p.path, p]))
  const usage = { promptTokens: 0, completionTokens: 0 }
  const outcomes: Array<[string, PageOutcome]> = []
  const report = async (path: string, outcome: PageOutcome) => {
    outcomes.push([path, outcome])
    await ctx.emit('message.delta', { text: `- ${path}: ${outcome}\n` })
  }

  for (const page of plan) {
    if (ctx.signal.aborted) throw ctx.signal.reason
    const cited = citedOf(page)
    const before = existing.get(page.path)
    if (before && sameCited(before.cited, cited) && (await records.exists(db, run.orgId, before.recordId))) {
      await report(page.path, 'unchanged')
      continue
    }
    const texts = await upstream(() => readFiles(session, job, page.files))
    const body = await writePage(engine, run.model, ctx.signal, job, page, texts, usage)
    const text: WikiPageText = {
      title: page.title,
      body,
      tags: [wikiTag(job.repo)],
      source: {
        kind: 'wiki',
        repo: job.repo,
        commit: job.commit,
        path: page.path,
        citedFiles: page.files.map((f) => f.path)
      }
    }
    const outcome = await db.transaction(async (tx): Promise<PageOutcome> => {
      await lockWiki(tx, run.orgId, job.repo)
      // another build may have written it meanwhile
      const current = await getWikiPage(tx, run.orgId, job.repo, page.path)
      if (current && sameCited(current.cited, cited) && (await records.exists(tx, run.orgId, current.recordId)))
        return 'unchanged'
      let recordId =
        current && (await records.revise(tx, run.orgId, current.recordId, text, run.realUserId))
          ? current.recordId
          : null
      const outcome = recordId ? 'updated' : 'created'
      recordId ??= await records.create(tx, run.orgId, text, run.realUserId)
      await putWikiPage(tx, { orgId: run.orgId, repo: job.repo, path: page.path, recordId, commit: job.commit, cited })
      return outcome
    })
    await report(page.path, outcome)
  }

  // a truncated tree (a huge repository) does not show every file: nothing is removed then
  if (!tree.data.truncated) {
    const planned = new Set(plan.map((p) => p.path))
    for (const path of existing.keys()) {
      if (planned.has(path)) continue
      const removed = await db.transaction(async (tx) => {
        await lockWiki(tx, run.orgId, job.repo)
        const current = await getWikiPage(tx, run.orgId, job.repo, path)
        if (!current) return false
        await deleteWikiPage(tx, run.orgId, job.repo, path)
        await records.remove(tx, run.orgId, current.recordId, run.realUserId)
        return true
      })
      if (removed) await report(path, 'removed')
    }
  }

  const count = (o: PageOutcome) => outcomes.filter(([, x]) => x === o).length
  const text = [
    `Wiki of ${job.repo} at ${short}: ${plan.length} ${plan.length === 1 ? 'page' : 'pages'}; ${count('created')} created, ${count('updated')} updated, ${count('unchanged')} unchanged, ${count('removed')} removed.`,
    ...outcomes.map(([path, outcome]) => `- ${path}: ${outcome}`)
  ].join('\n')
  await ctx.emit('message.completed', { text })
  return { text, facts: [], usage }
}

/** The page's text: the `echo` engine's deterministic outline, or what the run's model writes from the files. */
async function writePage(
  engine: Engine,
  model: string | null,
  signal: AbortSignal,
  job: WikiRunRow,
  page: PagePlan,
  texts: FileText[],
  usage: { promptTokens: number; completionTokens: number }
): Promise<string> {
  if (engine.id === 'echo') return outlinePage(job.repo, job.commit, page, texts)
  const chunks: string[] = []
  const used = await engine.chat(
    [
      { role: 'system', content: WIKI_SYSTEM_PROMPT },
      { role: 'user', content: pagePrompt(job.repo, job.commit, page, texts) }
    ],
    model,
    signal,
    { onToken: (t) => chunks.push(t) }
  )
  usage.promptTokens += used.promptTokens
  usage.completionTokens += used.completionTokens
  const written = chunks.join('').trim()
  // a model that answers nothing leaves the outline, never an empty page
  return (
    (written === '' ? outlinePage(job.repo, job.commit, page, texts).trimEnd() : written) +
    sourcesFooter(job.repo, job.commit, page)
  )
}

/** The cited files' text at the commit (contents API), a few at a time; large or binary files are not read. */
async function readFiles(session: GitHubSession, job: WikiRunRow, files: TreeFile[]): Promise<FileText[]> {
  const out: FileText[] = new Array(files.length)
  let next = 0
  const worker = async () => {
    while (next < files.length) {
      const i = next++
      out[i] = {
        file: files[i]!,
        text: files[i]!.size > MAX_FILE_BYTES ? null : await readFile(session, job, files[i]!.path)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(READ_CONCURRENCY, files.length) }, worker))
  return out
}

async function readFile(session: GitHubSession, job: WikiRunRow, path: string): Promise<string | null> {
  const [owner, repo] = job.repo.split('/') as [string, string]
  const { data } = await session.call(
    `${path} in ${job.repo}`,
    `GitHub has no file ${path} in ${job.repo} at ${job.commit.slice(0, 12)}`,
    (api: GitHubApi) => api.rest.repos.getContent({ owner, repo, path, ref: job.commit })
  )
  return fileText(data)
}

/** The text of a contents-API answer for a file; null for a folder, a large file (no content) or binary bytes. */
export function fileText(data: unknown): string | null {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return null
  const file = data as { type?: unknown; encoding?: unknown; content?: unknown }
  if (file.type !== 'file' || file.encoding !== 'base64' || typeof file.content !== 'string') return null
  const bytes = Buffer.from(file.content, 'base64')
  if (bytes.includes(0)) return null
  return bytes.toString('utf8')
}
