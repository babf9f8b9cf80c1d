// Knowledge records and document chunks wait for the embedding job in their own rows
// (`embedding_queued`, listed by a partial index), not in `embeddings`: adding one writes nothing
// else, and the job takes each in once, whatever happened to it meanwhile and however many
// instances run the job.
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { createEmbeddingWorker, type EmbeddingWorker } from '../../src/retrieval/embedding-worker.js'
import { systemClock } from '../../src/worker-loop.js'
import { multipart } from '../artifacts/helpers.js'
import { secondHandle, signUpWithOrg, waitFor } from '../helper.js'
import { startEmbeddingsUpstream } from '../memory/embeddings-upstream.js'
import { buildKnowledgeApp } from './group.js'

type App = Awaited<ReturnType<typeof buildKnowledgeApp>>

async function record(app: App, headers: Record<string, string>, title: string, body: string) {
  const res = await app.inject({ method: 'POST', url: '/api/knowledge', payload: { title, body }, headers })
  if (res.statusCode !== 201) throw new Error(`${res.statusCode} ${res.body}`)
  return res.json().record as { id: string; version: number }
}

async function documentOf(app: App, headers: Record<string, string>, name: string, markdown: string) {
  const form = multipart({ filename: name, type: 'text/markdown', bytes: markdown })
  const res = await app.inject({
    method: 'POST',
    url: '/api/knowledge/documents',
    payload: form.payload,
    headers: { ...form.headers, ...headers }
  })
  if (res.statusCode !== 202) throw new Error(`${res.statusCode} ${res.body}`)
  const id = res.json().document.id as string
  await waitFor(
    `${name} to be ready`,
    async () => (await app.inject({ url: `/api/knowledge/documents/${id}`, headers })).json().document.state === 'ready'
  )
  return id
}

const flags = async (app: App) =>
  rowsOf<{ kind: string; id: string; org_id: string; embedding_queued: boolean }>(
    await app.db.execute(sql`
      select 'record' as kind, id, org_id, embedding_queued from knowledge_records
      union all
      select 'chunk', id, org_id, embedding_queued from knowledge_chunks
      order by 1, 2`)
  )

/** Runs a worker until it finds nothing to take in or claim. */
async function drain(worker: EmbeddingWorker) {
  while ((await worker.runOnce()) > 0);
}

t.test(
  'adding a record or a document writes no embedding row; two workers take each text in and embed it once, after edits, deletes and across orgs',
  async (t) => {
    const upstream = await startEmbeddingsUpstream(t, ['text-embedding-test'])
    // small batches: the two workers take turns over several claims
    const app = await buildKnowledgeApp(t, {
      env: { EMBEDDING_MODEL: 'text-embedding-test', EMBEDDING_BASE_URL: upstream.url, EMBEDDING_BATCH: '2' }
    })
    const a = await signUpWithOrg(app)
    const b = await signUpWithOrg(app)
    const ha = { cookie: a.cookie }
    const hb = { cookie: b.cookie }

    const kept = await record(app, ha, 'Weekend rota', 'Priya handles pager duty on Saturdays and Sundays.')
    const edited = await record(app, ha, 'Coffee', 'The office coffee machine needs descaling once a month.')
    const deleted = await record(app, ha, 'Expenses', 'Expense claims above 500 euros need approval from a director.')
    const foreign = await record(
      app,
      hb,
      'Releases',
      'The billing service deploys from the release branch every Tuesday.'
    )
    const handbook = await documentOf(
      app,
      ha,
      'handbook.md',
      '# Travel\n\nTrain tickets are booked through the travel desk.\n\n# Laptops\n\nLaptops are replaced every three years.'
    )
    const dropped = await documentOf(app, ha, 'old.md', '# Parking\n\nThe car park closes at midnight.')

    t.same(
      rowsOf(await app.db.execute(sql`select kind, item_id from embeddings`)),
      [],
      'no row in embeddings: adding a record or a document wrote only the record and the chunks'
    )
    const before = await flags(app)
    t.equal(before.filter((r) => r.kind === 'record').length, 4)
    t.ok(before.filter((r) => r.kind === 'chunk').length >= 3, 'the documents were cut into chunks')
    t.ok(
      before.every((r) => r.embedding_queued === false),
      'each new record and chunk waits for the job in its own row'
    )

    // before the job takes them in: a record edited, one deleted, a document deleted
    const patched = await app.inject({
      method: 'PATCH',
      url: `/api/knowledge/${edited.id}`,
      headers: ha,
      payload: { body: 'The espresso maker is cleaned every few weeks.', version: edited.version }
    })
    t.equal(patched.statusCode, 200, patched.body)
    t.equal((await app.inject({ method: 'DELETE', url: `/api/knowledge/${deleted.id}`, headers: ha })).statusCode, 204)
    t.equal(
      (await app.inject({ method: 'DELETE', url: `/api/knowledge/documents/${dropped}`, headers: ha })).statusCode,
      204
    )

    // two workers at once (two instances, each with its own connections where the database has them)
    const second = createEmbeddingWorker({
      db: (await secondHandle(t, app.testDb)).database.db,
      log: app.log,
      models: app.retrieval.models,
      batch: 2,
      maxAttempts: 5,
      leaseMs: 60_000,
      pollMs: 60_000,
      backoffMs: 10,
      backoffMaxMs: 10,
      timeoutMs: 60_000,
      clock: systemClock
    })
    await Promise.all([drain(app.retrieval.worker!), drain(second)])
    t.equal(await app.retrieval.worker!.runOnce(), 0, 'nothing is left to take in or claim')
    t.ok(
      (await flags(app)).every((r) => r.embedding_queued === true),
      'every record and chunk there is was taken in'
    )

    const texts = rowsOf<{ kind: string; id: string; org_id: string; text: string }>(
      await app.db.execute(sql`
        select 'record' as kind, id, org_id, cairn_record_text(title, body) as text from knowledge_records
        union all
        select 'chunk', id, org_id, cairn_chunk_text(heading, text) from knowledge_chunks
        order by 1, 2`)
    )
    t.same(
      texts
        .filter((x) => x.kind === 'record')
        .map((x) => x.id)
        .sort(),
      [kept.id, edited.id, foreign.id].sort()
    )
    t.ok(texts.filter((x) => x.kind === 'chunk').length >= 2, "the kept document's chunks")
    const sent = upstream.requests.flatMap((r) => r.input)
    t.same(sent.slice().sort(), texts.map((x) => x.text).sort(), 'each text there is was embedded exactly once')
    t.notOk(
      sent.some((s) => /descaling|500 euros|car park/.test(s)),
      'no text deleted or replaced before its take-in was sent'
    )

    const rows = rowsOf<{
      kind: string
      item_id: string
      org_id: string
      pool_id: string
      state: string
      current: boolean
    }>(
      await app.db.execute(sql`
        select e.kind, e.item_id, e.org_id, e.pool_id, e.state,
               e.text_hash = coalesce(cairn_text_hash(cairn_record_text(r.title, r.body)),
                                      cairn_text_hash(cairn_chunk_text(c.heading, c.text))) as current
        from embeddings e
        left join knowledge_records r on e.kind = 'record' and r.id = e.item_id
        left join knowledge_chunks c on e.kind = 'chunk' and c.id = e.item_id
        order by 1, 2`)
    )
    t.same(
      rows.map((r) => `${r.kind}:${r.item_id}`),
      texts.map((x) => `${x.kind}:${x.id}`),
      'one row per record and chunk there is; none for the deleted ones'
    )
    t.ok(
      rows.every((r) => r.state === 'ready' && r.current && r.pool_id === ''),
      'each vector made from the text as it is now'
    )
    const orgOf = new Map(texts.map((x) => [`${x.kind}:${x.id}`, x.org_id]))
    t.ok(
      rows.every((r) => orgOf.get(`${r.kind}:${r.item_id}`) === r.org_id),
      "each row carries its record's or chunk's org"
    )
    t.equal(rows.find((r) => r.item_id === foreign.id)?.org_id, b.org.id, "the other org's record is its own")
    t.ok(
      rows.filter((r) => r.kind === 'chunk').every((r) => r.org_id === a.org.id),
      "the chunks are the document's org's"
    )

    // taking in again (another instance's late pass) changes nothing: same text, same model
    const calls = upstream.requests.length
    await app.db.execute(sql`update knowledge_records set embedding_queued = true`)
    await app.db.execute(sql`update knowledge_chunks set embedding_queued = true`)
    t.equal(await app.retrieval.worker!.runOnce(), 0, 'no text made pending again')
    t.equal(upstream.requests.length, calls, 'and none sent again')

    const find = async (q: string, headers: Record<string, string>) =>
      (await app.inject({ url: `/api/knowledge/search?q=${encodeURIComponent(q)}&mode=semantic`, headers })).json() as {
        items: Array<{ id: string; recordId: string | null; documentId: string | null }>
      }
    t.ok(
      (await find('How often is the coffee maker serviced?', ha)).items.some((i) => i.recordId === edited.id),
      'the record edited before it was taken in is found by its new meaning'
    )
    t.ok(
      (await find('When do we get new computers?', ha)).items.some((i) => i.documentId === handbook),
      'a chunk is found by meaning'
    )
    t.notOk(
      (await find('Who is on call this weekend?', hb)).items.some((i) => i.recordId === kept.id),
      "another org's vectors are never compared"
    )
    t.ok(
      (await find('When are releases of the billing service deployed?', hb)).items.some(
        (i) => i.recordId === foreign.id
      )
    )
  }
)
