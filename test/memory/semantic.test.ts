// Memory and knowledge that match meaning: the embedding job, hybrid search, the embedding
// model (the built-in offline one, the deployment's and an org provider's over a local
// /v1/embeddings server), faults, edits, deletes and tenancy; and a database without pgvector.
import { randomBytes } from 'node:crypto'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { createEmbeddingWorker } from '../../src/retrieval/embedding-worker.js'
import { systemClock } from '../../src/worker-loop.js'
import { buildTestApp, createTestDatabase, signUpWithOrg, waitFor } from '../helper.js'
import { startEmbeddingsUpstream } from './embeddings-upstream.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

const FACTS = [
  'Priya handles pager duty on Saturdays and Sundays',
  'The billing service deploys from the release branch every Tuesday',
  'The office coffee machine needs descaling once a month',
  'Expense claims above 500 euros need approval from a director'
]

async function add(app: App, content: string, headers: Record<string, string> = {}) {
  const res = await app.inject({
    method: 'POST',
    url: '/api/memory/items',
    headers,
    payload: { scope: 'org', content }
  })
  if (res.statusCode !== 201) throw new Error(`add: ${res.statusCode} ${res.body}`)
  return res.json().item as { id: string; embedding?: string }
}

async function search(app: App, q: string, mode?: string, headers: Record<string, string> = {}) {
  const res = await app.inject({
    url: `/api/memory/search?limit=5&q=${encodeURIComponent(q)}${mode ? `&mode=${mode}` : ''}`,
    headers
  })
  if (res.statusCode !== 200) throw new Error(`search: ${res.statusCode} ${res.body}`)
  return res.json() as {
    mode: string
    items: Array<{
      id: string
      content: string
      score: number
      scores: { fulltext: number | null; semantic: number | null; fused: number }
      embedding?: string
    }>
  }
}

/** Runs the embedding job until nothing is due (the worker's own loop is off in tests). */
async function embedAll(app: App) {
  while ((await app.retrieval.worker!.runOnce()) > 0);
}

async function embeddingRows(app: App) {
  return rowsOf<{ item_id: string; kind: string; state: string; model: string | null; has_vector: boolean }>(
    await app.db.execute(
      sql`select item_id, kind, state, model, vector is not null as has_vector from embeddings order by item_id`
    )
  )
}

t.test('facts are embedded in the background and found by meaning, words or both', async (t) => {
  const app = await buildTestApp(t)
  const config = (await app.inject({ url: '/api/config' })).json()
  t.equal(config.capabilities.semanticSearch, true, 'vectors are there')
  const ids: string[] = []
  for (const fact of FACTS) {
    const item = await add(app, fact)
    t.equal(item.embedding, 'pending', 'a new fact is pending: the write does not wait for its vector')
    ids.push(item.id)
  }
  // before the job ran: found by words only
  const early = await search(app, 'pager duty')
  t.equal(early.mode, 'hybrid')
  t.same(
    early.items.map((i) => i.id),
    [ids[0]]
  )
  t.match(early.items[0], { embedding: 'pending', scores: { semantic: null } })
  t.equal((await search(app, 'Who is on call this weekend?')).items.length, 0, 'no shared word, no vector yet')

  await embedAll(app)
  t.ok(
    (await embeddingRows(app)).every(
      (r) => r.state === 'ready' && r.has_vector && r.model === 'builtin:cairn-glove-100d-v1'
    ),
    'every fact has a vector of the built-in model'
  )
  const browse = (await app.inject({ url: '/api/memory/browse' })).json()
  t.ok(
    browse.items.every((i: { embedding: string }) => i.embedding === 'ready'),
    'browse shows them ready'
  )

  // a paraphrase: no word in common, found by meaning
  const paraphrase = await search(app, 'Who is on call this weekend?')
  t.equal(paraphrase.items[0]?.id, ids[0], 'the paraphrase finds its fact')
  t.match(paraphrase.items[0]!.scores, { fulltext: null, semantic: Number })
  t.notOk(
    paraphrase.items.some((i) => i.id === ids[2]),
    'an unrelated fact (the coffee machine) is not a hit'
  )
  t.equal((await search(app, 'Who is on call this weekend?', 'fulltext')).items.length, 0, 'words alone miss it')
  const semantic = await search(app, 'Who is on call this weekend?', 'semantic')
  t.equal(semantic.mode, 'semantic')
  t.equal(semantic.items[0]?.id, ids[0])
  t.equal(semantic.items[0]!.score, semantic.items[0]!.scores.semantic, 'semantic mode scores by similarity')

  // both: words and meaning, fused by reciprocal rank (k = 60)
  const both = await search(app, 'pager duty on weekends')
  t.equal(both.items[0]?.id, ids[0])
  t.ok(both.items[0]!.scores.fulltext! > 0 && both.items[0]!.scores.semantic! > 0, 'matched by words and meaning')
  t.equal(both.items[0]!.scores.fused, Math.round((2 / 61) * 1e6) / 1e6, 'first in both rankings: 1/61 + 1/61')
  t.equal(both.items[0]!.score, both.items[0]!.scores.fused)
  const fulltextOnly = await search(app, 'pager duty on weekends', 'fulltext')
  t.equal(fulltextOnly.mode, 'fulltext')
  t.ok(fulltextOnly.items.every((i) => i.scores.semantic === null))

  const bad = await app.inject({ url: '/api/memory/search?q=x&mode=vectors' })
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().error, 'validation_failed')

  // a run's recall searches the prompt's meaning and the ledger says how
  const run = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: 'Who is on call this weekend?' } })
  ).json().run
  await app.inject({ url: `/api/runs/${run.id}?wait=20` })
  const frame = (await app.inject({ url: `/api/memory/recalls?runId=${run.id}` })).json().recalls[0]
  t.match(frame, { mode: 'hybrid', itemIds: [ids[0]] }, 'the recall found the fact by meaning, and says hybrid')
})

t.test('a query with no word the model knows has no meaning to rank by: its search reads no vectors', async (t) => {
  const app = await buildTestApp(t)
  const ids: string[] = []
  for (const fact of FACTS) ids.push((await add(app, fact)).id)
  await embedAll(app)
  const sent = async (q: string) => {
    const statements: string[] = []
    const stop = app.database.onStatement((query) => statements.push(query))
    try {
      return { found: await search(app, q), statements }
    } finally {
      stop()
    }
  }
  // a misspelling: the words' side corrects it, the built-in model knows no word of it
  const typo = await sent('descalng')
  t.equal(typo.found.mode, 'hybrid', 'the mode asked for, as before')
  t.same(
    typo.found.items.map((i) => i.id),
    [ids[2]]
  )
  t.match(typo.found.items[0]!.scores, { fulltext: Number, semantic: null })
  t.notOk(
    typo.statements.some((q) => q.includes('<=>')),
    'no vector is read for the zero vector, whose distance to any is NaN'
  )
  // a word the model knows: the vector side is there
  const known = await sent('coffee')
  t.equal(known.found.items[0]?.id, ids[2])
  t.ok(known.statements.some((q) => q.includes('<=>')))
})

t.test('an edit re-embeds, a delete deletes the vector, and tenants never meet', async (t) => {
  const app = await buildTestApp(t)
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  const A = { cookie: a.cookie }
  const B = { cookie: b.cookie }
  const pager = await add(app, FACTS[0]!, A)
  const coffee = await add(app, FACTS[2]!, A)
  await add(app, FACTS[1]!, B)
  await embedAll(app)

  t.same(
    (await search(app, 'Who is on call this weekend?', 'semantic', B)).items.map((i) => i.content),
    [],
    "another org's vectors are never compared"
  )
  t.equal((await search(app, 'Who is on call this weekend?', 'semantic', A)).items[0]?.id, pager.id)

  // the edit: its vector is forgotten in the same statement, and made again from the new text
  const edited = await app.inject({
    method: 'PATCH',
    url: `/api/memory/item/${pager.id}`,
    headers: A,
    payload: { content: 'The espresso maker is cleaned every few weeks' }
  })
  t.equal(edited.statusCode, 200)
  const row = (await embeddingRows(app)).find((r) => r.item_id === pager.id)!
  t.match(row, { state: 'pending', has_vector: false }, 'no vector outlives its text')
  t.equal((await search(app, 'Who is on call this weekend?', 'semantic', A)).items.length, 0)
  await embedAll(app)
  const coffeeish = await search(app, 'How often is the coffee maker serviced?', 'semantic', A)
  t.ok(
    coffeeish.items.some((i) => i.id === pager.id),
    'the new text is found by its meaning'
  )

  const gone = await app.inject({ method: 'DELETE', url: `/api/memory/item/${coffee.id}`, headers: A })
  t.equal(gone.statusCode, 200)
  t.notOk(
    (await embeddingRows(app)).some((r) => r.item_id === coffee.id),
    'a delete deletes the vector'
  )

  // re-embedding another org's fact is a 404, like every id outside the caller's org
  const foreign = await app.inject({ method: 'POST', url: `/api/memory/item/${pager.id}/embed`, headers: B })
  t.equal(foreign.statusCode, 404)
  t.equal(foreign.json().error, 'not found in this pool')
})

t.test(
  'knowledge records and chunks are embedded and searched by meaning, honouring phrases and exclusions',
  async (t) => {
    const app = await buildTestApp(t)
    const record = async (title: string, body: string) =>
      (await app.inject({ method: 'POST', url: '/api/knowledge', payload: { title, body } })).json().record
    const onCall = await record('Weekend rota', 'Priya handles pager duty on Saturdays and Sundays.')
    const deploys = await record('Releases', 'The billing service deploys from the release branch every Tuesday.')
    await embedAll(app)
    const find = async (q: string, mode = '') =>
      (
        await app.inject({ url: `/api/knowledge/search?q=${encodeURIComponent(q)}${mode ? `&mode=${mode}` : ''}` })
      ).json()
    const found = await find('Who is on call this weekend?')
    t.equal(found.mode, 'hybrid')
    t.equal(found.items[0]?.id, onCall.id)
    t.match(found.items[0], { kind: 'record', scores: { fulltext: null, semantic: Number } })
    t.notMatch(found.items[0].snippet, /<mark>/, 'nothing to mark when only the meaning matched')
    t.equal((await find('Who is on call this weekend?', 'fulltext')).items.length, 0)
    // an exclusion holds for hits by meaning too
    t.notOk(
      (await find('Who is on call this weekend? -priya')).items.some((i: { id: string }) => i.id === onCall.id),
      'an excluded word keeps the record out'
    )
    t.ok((await find('ship invoicing "billing service"')).items.some((i: { id: string }) => i.id === deploys.id))
    // a misspelled word the model does not know: found by its corrected words, no vector read
    const statements: string[] = []
    const stop = app.database.onStatement((query) => statements.push(query))
    const typo = await find('relase').finally(stop)
    t.equal(typo.mode, 'hybrid', 'the mode asked for, as before')
    t.same(
      typo.items.map((i: { id: string }) => i.id),
      [deploys.id]
    )
    t.notOk(
      statements.some((q) => q.includes('<=>')),
      'no vector is read for the zero vector'
    )
  }
)

t.test(
  'the deployment model over /v1/embeddings: batched, failures retried with backoff, then failed, then retried by hand',
  async (t) => {
    const upstream = await startEmbeddingsUpstream(t, ['text-embedding-test'])
    // ahead of the database's clock, which dates new rows: they are due by this one
    let now = Date.now() + 60_000
    const app = await buildTestApp(t, {
      env: {
        EMBEDDING_MODEL: 'text-embedding-test',
        EMBEDDING_BASE_URL: upstream.url,
        EMBEDDING_API_KEY: 'sk-embed',
        EMBEDDING_MAX_ATTEMPTS: '2',
        EMBEDDING_BACKOFF_MS: '1000'
      },
      clock: { now: () => new Date(now) }
    })
    const model = (await app.inject({ url: '/api/models/embedding' })).json()
    t.same(model, { model: 'text-embedding-test', source: 'deployment', dimensions: null }, 'no vector yet')
    const items: Array<{ id: string }> = []
    for (const fact of FACTS) items.push(await add(app, fact))
    upstream.failNext(1)
    t.equal(await app.retrieval.worker!.runOnce(), FACTS.length, 'one claim takes the batch')
    t.equal(upstream.requests.length, 1, 'one /embeddings call')
    t.same(upstream.requests[0]!.input.sort(), [...FACTS].sort(), 'every text in it')
    t.equal(upstream.requests[0]!.authorization, 'Bearer sk-embed')
    t.equal(
      (await embeddingRows(app)).filter((r) => r.state === 'pending').length,
      FACTS.length,
      'put back to try again'
    )
    t.equal(await app.retrieval.worker!.runOnce(), 0, 'not before its backoff')
    // words still work meanwhile, and the write did not wait or fail
    t.equal((await search(app, 'pager duty')).items[0]?.id, items[0]!.id)

    now += 60_000
    upstream.failNext(1, 500)
    await app.retrieval.worker!.runOnce()
    const browse = (await app.inject({ url: '/api/memory/browse' })).json()
    t.ok(
      browse.items.every(
        (i: { embedding: string; embeddingError: string }) =>
          i.embedding === 'failed' && /answered 500: the embedding service is overloaded/.test(i.embeddingError)
      ),
      'out of tries: failed, with the reason'
    )

    const again = await app.inject({ method: 'POST', url: `/api/memory/item/${items[0]!.id}/embed` })
    t.equal(again.statusCode, 202)
    t.same(again.json(), { ok: true, embedding: 'pending' })
    await embedAll(app)
    const states = (await embeddingRows(app)).map((r) => [r.item_id, r.state])
    t.same(
      states.filter(([, s]) => s === 'ready').map(([id]) => id),
      [items[0]!.id],
      'the fact asked for is embedded; the others wait for a model change or their own retry'
    )
    t.equal((await search(app, 'Who is on call this weekend?')).items[0]?.id, items[0]!.id)
    t.same((await app.inject({ url: '/api/models/embedding' })).json().dimensions, 100)
  }
)

t.test("an org's embedding model among its providers': chosen, tried, and every text embedded again", async (t) => {
  const upstream = await startEmbeddingsUpstream(t, ['embed-small', 'chat-model'])
  const app = await buildTestApp(t, {
    env: { PROVIDER_ALLOW_PRIVATE: 'true', SECRETS_KEY: randomBytes(32).toString('base64') }
  })
  const admin = await signUpWithOrg(app)
  const headers = { cookie: admin.cookie }
  const fact = await add(app, FACTS[0]!, headers)
  await embedAll(app)
  t.same((await app.inject({ url: '/api/models/embedding', headers })).json(), {
    model: 'cairn-glove-100d-v1',
    source: 'builtin',
    dimensions: 100
  })
  const provider = await app.inject({
    method: 'POST',
    url: '/api/providers',
    headers,
    payload: { name: 'local', baseUrl: upstream.url, apiKey: 'sk-provider' }
  })
  t.equal(provider.statusCode, 201, provider.body)

  const unknown = await app.inject({
    method: 'PUT',
    url: '/api/models/embedding',
    headers,
    payload: { model: 'nope' }
  })
  t.equal(unknown.statusCode, 400)
  t.match(unknown.json(), { error: 'validation_failed', details: [{ path: '/body/model' }] })

  const chosen = await app.inject({
    method: 'PUT',
    url: '/api/models/embedding',
    headers,
    payload: { model: 'embed-small' }
  })
  t.equal(chosen.statusCode, 200, chosen.body)
  t.same(chosen.json(), { model: 'embed-small', source: 'org', dimensions: 100 })
  t.equal(upstream.requests.at(-1)!.authorization, 'Bearer sk-provider', "tried once with the provider's key")
  const pending = (await app.inject({ url: '/api/memory/browse', headers })).json().items[0]
  t.equal(pending.embedding, 'pending', 'a new model: embedded again in the background')
  // meanwhile only vectors of the current model are compared: none yet
  t.equal((await search(app, 'Who is on call this weekend?', 'semantic', headers)).items.length, 0)
  await embedAll(app)
  t.match(await embeddingRows(app), [{ item_id: fact.id, state: 'ready', model: /^provider:.+:embed-small$/ }])
  t.equal((await search(app, 'Who is on call this weekend?', 'semantic', headers)).items[0]?.id, fact.id)
  t.ok(
    upstream.requests.some((r) => r.model === 'embed-small' && r.input.includes('Who is on call this weekend?')),
    "the query is embedded with the org's model too"
  )
  // forgetting the choice goes back to the built-in model
  const forgot = await app.inject({ method: 'PUT', url: '/api/models/embedding', headers, payload: { model: null } })
  t.same(forgot.json(), { model: 'cairn-glove-100d-v1', source: 'builtin', dimensions: 100 })
})

t.test(
  'adding a fact writes only the fact: the job takes it in, after edits, deletes and other orgs alike',
  async (t) => {
    const app = await buildTestApp(t)
    const other = await signUpWithOrg(app)
    const kept = await add(app, FACTS[0]!)
    const edited = await add(app, FACTS[1]!)
    const deleted = await add(app, FACTS[2]!)
    const foreign = await add(app, FACTS[3]!, { cookie: other.cookie })
    const queue = async () =>
      rowsOf<{ id: string; embedding_queued: boolean }>(
        await app.db.execute(sql`select id, embedding_queued from memory_items order by id`)
      )
    t.same(await embeddingRows(app), [], 'no row in embeddings yet: the write made none')
    t.ok(
      (await queue()).every((r) => r.embedding_queued === false),
      'each new fact waits for the job in the fact row itself'
    )
    const browse = (await app.inject({ url: '/api/memory/browse' })).json()
    t.ok(
      browse.items.every((i: { embedding: string }) => i.embedding === 'pending'),
      'a fact not taken in yet shows pending'
    )

    // before the job takes them in: one is edited, one deleted
    const patched = await app.inject({
      method: 'PATCH',
      url: `/api/memory/item/${edited.id}`,
      payload: { content: 'The espresso maker is cleaned every few weeks' }
    })
    t.equal(patched.statusCode, 200)
    t.equal((await app.inject({ method: 'DELETE', url: `/api/memory/item/${deleted.id}` })).statusCode, 200)

    // two workers at once (two instances): each fact is taken in and embedded once
    const second = createEmbeddingWorker({
      db: app.db,
      log: app.log,
      models: app.retrieval.models,
      batch: 64,
      maxAttempts: 5,
      leaseMs: 60_000,
      pollMs: 60_000,
      backoffMs: 10,
      backoffMaxMs: 10,
      timeoutMs: 60_000,
      clock: systemClock
    })
    await Promise.all([embedAll(app), (async () => void (await second.runOnce()))()])
    await embedAll(app)
    t.ok(
      (await queue()).every((r) => r.embedding_queued === true),
      'every fact taken in'
    )
    const rows = rowsOf<{ item_id: string; org_id: string; pool_id: string; state: string; current: boolean }>(
      await app.db.execute(
        sql`select e.item_id, e.org_id, e.pool_id, e.state, e.text_hash = cairn_text_hash(m.content) as current
          from embeddings e join memory_items m on m.id = e.item_id order by e.item_id`
      )
    )
    const all = rowsOf<{ item_id: string }>(await app.db.execute(sql`select item_id from embeddings`))
    t.same(
      all.map((r) => r.item_id).sort(),
      [kept.id, edited.id, foreign.id].sort(),
      'one row per fact there is; none for the deleted one'
    )
    t.ok(
      rows.every((r) => r.state === 'ready' && r.current === true),
      'each vector made from the text as it is now'
    )
    const pools = rowsOf<{ id: string; org_id: string }>(await app.db.execute(sql`select id, org_id from memory_pools`))
    const poolOf = new Map(pools.map((p) => [p.id, p.org_id]))
    t.ok(
      rows.every((r) => poolOf.get(r.pool_id) === r.org_id),
      "each row carries its fact's org and pool"
    )
    t.equal(rows.find((r) => r.item_id === foreign.id)?.org_id, other.org.id, "the other org's fact is its own")
    const found = await search(app, 'How often is the coffee maker serviced?', 'semantic')
    t.ok(
      found.items.some((i) => i.id === edited.id),
      'the fact edited before it was taken in is found by its new meaning'
    )
    t.equal(
      (await search(app, 'Who is on call this weekend?', 'semantic', { cookie: other.cookie })).items.length,
      0,
      "another org's vectors are never compared"
    )
  }
)

t.test('a worker killed mid-batch loses nothing: another embeds its texts once the lease passes', async (t) => {
  const app = await buildTestApp(t, { env: { EMBEDDING_LEASE_MS: '300' } })
  for (const fact of FACTS) await add(app, fact)
  const builtin = await app.retrieval.models.forOrg(DEV_ORG.id)
  // a model that answers only when stopped: the worker is killed while it waits
  const hanging = {
    ...builtin,
    embed: (_texts: string[], o: { signal?: AbortSignal | undefined }) =>
      new Promise<number[][]>((_, reject) => o.signal?.addEventListener('abort', () => reject(new Error('killed'))))
  }
  const doomed = createEmbeddingWorker({
    db: app.db,
    log: app.log,
    models: { ...app.retrieval.models, forOrg: async () => hanging },
    batch: 64,
    maxAttempts: 5,
    leaseMs: 300,
    pollMs: 60_000,
    backoffMs: 10,
    backoffMaxMs: 10,
    timeoutMs: 60_000,
    clock: systemClock
  })
  const working = doomed.runOnce()
  await waitFor('the claim', async () => {
    const leased = rowsOf<{ n: number }>(
      await app.db.execute(sql`select count(*)::int as n from embeddings where lease_owner is not null`)
    )
    return leased[0]!.n === FACTS.length
  })
  doomed.kill()
  await working
  t.equal(await app.retrieval.worker!.runOnce(), 0, "the dead worker's lease still holds its texts")
  await waitFor('the lease to pass', async () => (await app.retrieval.worker!.runOnce()) > 0)
  await embedAll(app)
  t.ok(
    (await embeddingRows(app)).every((r) => r.state === 'ready' && r.has_vector),
    'every text embedded by the live worker'
  )
})

// last: it takes pgvector out of its database, which the next test of this file would be handed
t.test('a database without pgvector: full text only, semanticSearch false', async (t) => {
  const db = await createTestDatabase(t)
  await db.database.db.execute(sql`alter table embeddings drop column vector`)
  await db.database.db.execute(sql`drop extension vector`)
  const app = await buildTestApp(t, { db })
  t.equal((await app.inject({ url: '/api/config' })).json().capabilities.semanticSearch, false)
  t.equal(app.retrieval.worker, null, 'no embedding job')
  const item = await add(app, FACTS[0]!)
  t.equal(item.embedding, undefined, 'no embedding state where there are no vectors')
  const found = await search(app, 'pager duty', 'semantic')
  t.equal(found.mode, 'fulltext', 'every mode ranks by words')
  t.equal(found.items[0]?.id, item.id)
  const embed = await app.inject({ method: 'POST', url: `/api/memory/item/${item.id}/embed` })
  t.equal(embed.statusCode, 409)
})
