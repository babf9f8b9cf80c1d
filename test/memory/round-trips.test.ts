// What a memory search costs the database, counted in statements (each one round trip): the
// org's memory switch, the pool and the ranking are one statement (the postgres backend), in
// every mode, with the search cache on and off. A count, not a timing. The answers are the
// ones the pool's own search gives (the pool looked up first, then searched).
import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { buildTestApp } from '../helper.js'
import { addFacts, FAST } from './helpers.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

/** Statements of other groups' pollers, which may run meanwhile. */
const ELSEWHERE = /\b(slack_\w+|knowledge_\w+|memory_captures|mcp_servers|automations|blobs?|listen|runs|run_events)\b/i

/** The instance's other loops kept quiet (they poll in transactions of their own). */
const QUIET = {
  ...FAST,
  MEMORY_CAPTURE_WORKER: 'false',
  KNOWLEDGE_WORKER: 'false',
  RUN_POLL_MS: '600000',
  RUN_SWEEP_MS: '600000',
  SCHEDULER_POLL_MS: '60000',
  SLACK_OUTBOX_POLL_MS: '600000'
}

const FACTS = [
  'We deploy the payments service with Kubernetes on Fridays',
  'The office coffee machine needs descaling monthly',
  'Kubernetes cluster credentials live in the vault',
  'Deploy freezes start on December 15',
  'The vault door code changes weekly',
  'Priya handles pager duty on Saturdays and Sundays'
]

async function searched(app: App, q: string, mode?: string) {
  const seen: string[] = []
  const stop = app.testDb.database.onStatement((text) => {
    const s = text.replace(/\s+/g, ' ').trim()
    // a bare BEGIN or COMMIT is a poller's (its statements are left out above): a search opens no transaction
    if (!ELSEWHERE.test(s) && !/^(begin|commit|rollback)$/i.test(s)) seen.push(s)
  })
  try {
    const res = await app.inject({
      url: `/api/memory/search?limit=5&q=${encodeURIComponent(q)}${mode ? `&mode=${mode}` : ''}`
    })
    if (res.statusCode !== 200) throw new Error(`search: ${res.statusCode} ${res.body}`)
    // the org's embedding model is read at most once a second (kept by the models), not per search
    const own = seen.filter((s) => !/\bfrom "?embedding_settings"?/.test(s))
    return { body: res.json(), statements: own }
  } finally {
    stop()
  }
}

const QUERIES: Array<[string, string | undefined]> = [
  ['kubernetes', undefined],
  ['vault credentials', undefined],
  ['kubernets', 'fulltext'],
  // no fact has both words: any word will do, in the same statement
  ['vault coffee', 'fulltext'],
  ['who is on call this weekend', 'semantic'],
  ['deploy', 'hybrid'],
  ['zebra', undefined]
]

for (const cache of ['1000', '0']) {
  t.test(`a memory search is one statement (MEMORY_SEARCH_CACHE=${cache})`, async (t) => {
    const app = await buildTestApp(t, { env: { ...QUIET, MEMORY_SEARCH_CACHE: cache } })
    const pool = await addFacts(app.db, DEV_ORG.id, 'org', '', FACTS)
    if (app.retrieval.worker) while ((await app.retrieval.worker.runOnce()) > 0);
    // the first search prepares the statements on the connection and reads the org's model
    await searched(app, 'warm up')
    for (const [q, mode] of QUERIES) {
      for (const round of ['first', 'again']) {
        const { body, statements } = await searched(app, q, mode)
        const shown = statements.map((s, i) => `${i + 1}. ${s.slice(0, 100)}`).join(' | ')
        t.equal(statements.length, 1, `${q} (${mode ?? 'default'}, ${round}): ${statements.length} statements`, {
          shown
        })
        // the answer is the pool's own search's
        const mine = await app.memory.backend!.search(pool, q, 5, { mode: mode as 'fulltext' | undefined })
        t.same(
          body.items.map((i: { id: string; score: number; content: string }) => [i.id, i.score, i.content]),
          mine.items.map((i) => [i.id, i.score, i.content]),
          `${q} (${mode ?? 'default'}, ${round}): the same facts, scores and order`
        )
        t.equal(body.mode, mine.mode)
        t.equal(body.truncated, mine.truncated)
      }
    }
  })
}

t.test('memory off, or no pool yet: still one statement, and nothing found', async (t) => {
  const app = await buildTestApp(t, { env: QUIET })
  await searched(app, 'warm up')
  const empty = await searched(app, 'vault')
  t.equal(empty.statements.length, 1, `${empty.statements.length} statements`)
  t.same(empty.body.items, [])
  t.equal(empty.body.enabled, true)
  await addFacts(app.db, DEV_ORG.id, 'org', '', FACTS)
  const off = await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: false } })
  t.equal(off.statusCode, 200, off.body)
  const disabled = await searched(app, 'vault')
  t.equal(disabled.statements.length, 1, `${disabled.statements.length} statements`)
  t.same(disabled.body.items, [])
  t.equal(disabled.body.enabled, false)
})
