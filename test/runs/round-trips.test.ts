// What an echo run's life costs the database, counted in statements (each one round trip:
// BEGIN and COMMIT are statements too): a count, not a timing. Its dispatch, claim, recall,
// events and end; the instance's other workers are kept quiet and left out.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildTestApp } from '../helper.js'

/** Statements of other groups' pollers and reactions, which may run meanwhile. */
const ELSEWHERE = /\b(slack_\w+|knowledge_\w+|memory_captures|memory_items|mcp_servers|automations|blobs?|listen)\b/i

type TestApp = FastifyInstance & {
  testDb: {
    database: { kind: string; onStatement(fn: (q: string, params: readonly unknown[]) => void): () => void }
  }
}

const QUIET = {
  RUN_POLL_MS: '600000',
  RUN_SWEEP_MS: '600000',
  KNOWLEDGE_WORKER: 'false',
  MEMORY_CAPTURE_WORKER: 'false',
  SCHEDULER_POLL_MS: '60000',
  SLACK_OUTBOX_POLL_MS: '600000'
}

async function lifeOf(app: TestApp, prompt: string) {
  const seen: string[] = []
  const parameters: Array<readonly unknown[]> = []
  const stop = app.testDb.database.onStatement((q, params) => {
    const text = q.replace(/\s+/g, ' ').trim()
    if (!ELSEWHERE.test(text)) {
      seen.push(text)
      parameters.push(params)
    }
  })
  let id = ''
  const ended = new Promise<string>((resolve) => {
    const off = app.eventBus.subscribeAll((event) => {
      if (event.runId === id && ['run.succeeded', 'run.failed', 'run.cancelled'].includes(event.type)) {
        // counting stops as the end is announced: what other groups do about it is not the run's
        stop()
        off()
        resolve(event.type)
      }
    })
  })
  const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt } })
  if (res.statusCode !== 201) throw new Error(`POST /api/runs: ${res.statusCode} ${res.body}`)
  id = res.json().run.id
  const end = await ended
  return { end, statements: seen, parameters }
}

for (const prompt of ['hello there world', 'a longer answer streamed word by word: ' + 'word '.repeat(40)]) {
  t.test(`an echo run's life is at most six round trips (${prompt.length} characters)`, async (t) => {
    const app = await buildTestApp(t, { env: QUIET })
    // the first run prepares the statements on the connection (a Parse once per connection)
    t.equal((await lifeOf(app, 'warm up')).end, 'run.succeeded')
    const life = await lifeOf(app, prompt)
    t.equal(life.end, 'run.succeeded')
    const shown = life.statements.map((s, i) => `${i + 1}. ${s.slice(0, 100)}`).join('\n')
    t.ok(life.statements.length <= 6, `${life.statements.length} statements:\n${shown}`)
    const claim = life.statements.findIndex((s) => s.includes('queued_orgs'))
    // the org's model defaults are cached for 2 s: on a slow machine the warm-up's reading may have
    // run out, and the dispatch reads them again (one statement more, still within six)
    const defaultsRead = life.statements.some((s) => s.includes('from model_defaults')) ? 1 : 0
    t.ok(
      claim >= 0 && claim <= 2 + defaultsRead,
      `the dispatch before the claim: ${claim} (the run with the queue's room, and run.queued)`
    )
    t.notOk(
      life.statements.some((s) => /^(begin|commit)\b/i.test(s)),
      'no transaction of several statements: each write is one statement'
    )
    t.equal(life.statements.filter((s) => s.includes('with fin as')).length, 1, 'the end is one statement')
    // postgres.js sends an unprepared statement with parameters in two round trips (their types asked first)
    if (app.testDb.database.kind === 'postgres')
      t.same(
        life.parameters[claim],
        [],
        'the claim, planned each time, carries its values as constants: one round trip'
      )
  })
}
