import { index, jsonb, pgTable, primaryKey, text } from 'drizzle-orm/pg-core'
import { organizations } from '../auth/tables.js'
import { ts } from '../db/columns.js'

/**
 * Conditional requests: the last answer GitHub gave an org for one list
 * request (`request` is the method, path and query), with its ETag. The next identical
 * request sends `If-None-Match`; a 304 (which GitHub does not count against the rate
 * limit) is answered from `body`. Kept in the database so every instance shares it;
 * cleared when the org connects or disconnects GitHub.
 */
export const githubCache = pgTable(
  'github_cache',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    request: text('request').notNull(),
    etag: text('etag').notNull(),
    /** what the route answers from it: the mapped items and whether GitHub has a next page */
    body: jsonb('body').$type<{ items: unknown[]; hasNext: boolean }>().notNull(),
    updatedAt: ts('updated_at').notNull().defaultNow()
  },
  (t) => [primaryKey({ columns: [t.orgId, t.request] })]
)

/**
 * A repo-wiki run (POST /api/knowledge/wiki): the repository and the commit its ref was
 * resolved to when it was asked for. Written in the run's own transaction, so the worker
 * builds a wiki only for a run this route started (a run's metadata alone is not enough:
 * any caller of POST /api/runs sets that).
 */
export const githubWikiRuns = pgTable(
  'github_wiki_runs',
  {
    runId: text('run_id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    repo: text('repo').notNull(),
    ref: text('ref').notNull(),
    commit: text('commit').notNull(),
    createdAt: ts('created_at').notNull().defaultNow()
  },
  (t) => [index('github_wiki_runs_org_idx').on(t.orgId, t.repo)]
)

/**
 * One page of an org's wiki of a repository: the knowledge record it was written to and
 * the blob SHA of each file it cites, as of the commit it was last written at. A later
 * build rewrites the page only when one of those SHAs (or the set of files) changed.
 */
export const githubWikiPages = pgTable(
  'github_wiki_pages',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    repo: text('repo').notNull(),
    path: text('path').notNull(),
    recordId: text('record_id').notNull(),
    commit: text('commit').notNull(),
    /** cited file path -> its blob SHA */
    cited: jsonb('cited').$type<Record<string, string>>().notNull(),
    updatedAt: ts('updated_at').notNull().defaultNow()
  },
  (t) => [primaryKey({ columns: [t.orgId, t.repo, t.path] })]
)
