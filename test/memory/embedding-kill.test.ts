// The embedding job across processes: an instance killed (SIGKILL) while its /v1/embeddings
// call is held open loses nothing and doubles nothing: the facts it took in and claimed wait out
// their lease, then another instance embeds each of them exactly once.
// On Postgres two live server processes share the database and the job. The embedded database
// (PGlite) is one process per data directory by design, so there the other instance is the next
// process on the same directory, started after the kill.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { buildTestApp, createTestDatabase, waitFor, type Teardown } from '../helper.js'
import { startServer } from '../server-process.js'
import { startEmbeddingsUpstream } from './embeddings-upstream.js'

const MODEL = 'text-embedding-test'
/** the key of the instance to be killed: its calls are held open, never answered */
const HELD_KEY = 'sk-held'
const LIVE_KEY = 'sk-live'

const FACTS = [
  'Priya handles pager duty on Saturdays and Sundays',
  'The billing service deploys from the release branch every Tuesday',
  'The office coffee machine needs descaling once a month',
  'Expense claims above 500 euros need approval from a director',
  'The staging database is restored from backup every night',
  'New laptops are ordered through the IT service desk'
]
const LATER = ['The VPN certificate is renewed every spring', 'Visitors sign in at the front desk']

/**
 * The local /v1/embeddings server (embeddings-upstream.ts) holding open every call made with HELD_KEY (the
 * instance that made it is killed meanwhile); `answered` are the calls it answered, with when each arrived.
 */
async function startHoldingUpstream(t: Teardown) {
  const upstream = await startEmbeddingsUpstream(t, [MODEL], { holdKey: HELD_KEY })
  return {
    url: upstream.url,
    held: upstream.held,
    get answered() {
      return upstream.requests.filter((r) => r.authorization !== `Bearer ${HELD_KEY}`)
    }
  }
}

function instanceEnv(upstreamUrl: string, key: string, dataDir: string, databaseUrl?: string) {
  return {
    ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
    DATA_DIR: dataDir,
    EMBEDDING_MODEL: MODEL,
    EMBEDDING_BASE_URL: upstreamUrl,
    EMBEDDING_API_KEY: key,
    EMBEDDING_LEASE_MS: '3000',
    EMBEDDING_POLL_MS: '100',
    // the held call is never given up: the instance dies in it
    EMBEDDING_TIMEOUT_MS: '600000'
  }
}

function tempDir(t: Teardown, prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function addFact(url: string, content: string) {
  const res = await fetch(`${url}/api/memory/items`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ scope: 'org', content })
  })
  if (res.status !== 201) throw new Error(`add: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { item: { id: string } }).item.id
}

/** How many times each text was sent in an answered call. */
function sentCounts(answered: Array<{ input: string[] }>) {
  const counts = new Map<string, number>()
  for (const text of answered.flatMap((a) => a.input)) counts.set(text, (counts.get(text) ?? 0) + 1)
  return counts
}

t.test(
  'two instances on one Postgres: one killed mid-batch, the other embeds every fact once after the lease runs out',
  { skip: process.env.DATABASE_URL ? false : 'two processes share a database only on Postgres (DATABASE_URL)' },
  async (t) => {
    const upstream = await startHoldingUpstream(t)
    const shared = await createTestDatabase(t)
    // the facts are written before either instance runs the job (a test app runs none), so the
    // first instance takes them all in with its first claim
    const seeder = await buildTestApp(t, { db: shared })
    const ids: string[] = []
    for (const content of FACTS) {
      const res = await seeder.inject({ method: 'POST', url: '/api/memory/items', payload: { scope: 'org', content } })
      if (res.statusCode !== 201) throw new Error(`add: ${res.statusCode} ${res.body}`)
      ids.push(res.json().item.id)
    }
    const db = seeder.db
    const facts = async () =>
      rowsOf<{
        id: string
        content: string
        embedding_queued: boolean
        state: string | null
        lease_owner: string | null
        lease_ms: number | null
        current: boolean | null
        rows: number
      }>(
        await db.execute(sql`
          select m.id, m.content, m.embedding_queued, e.state, e.lease_owner,
                 (extract(epoch from e.lease_expires_at) * 1000)::float8 as lease_ms,
                 e.text_hash = cairn_text_hash(m.content) as current,
                 (select count(*)::int from embeddings x where x.kind = 'memory' and x.item_id = m.id) as rows
          from memory_items m left join embeddings e on e.kind = 'memory' and e.item_id = m.id
          order by m.id`)
      )

    const doomed = await startServer(instanceEnv(upstream.url, HELD_KEY, tempDir(t, 'cairn-embed-a-'), shared.url))
    t.teardown(() => doomed.kill('SIGKILL'))
    await waitFor('the first instance to call /v1/embeddings', async () => upstream.held.length > 0, 60_000)
    t.same(upstream.held[0]!.input.slice().sort(), [...FACTS].sort(), 'it took every fact in and claimed them at once')
    const claimed = await facts()
    t.ok(
      claimed.every((f) => f.embedding_queued && f.state === 'pending' && f.lease_owner !== null),
      'each fact taken in, its row leased by the instance'
    )
    const owner = claimed[0]!.lease_owner

    // the second instance shares the job while the first is alive: it embeds what is written
    // now, never what the first holds
    const live = await startServer(instanceEnv(upstream.url, LIVE_KEY, tempDir(t, 'cairn-embed-b-'), shared.url))
    t.teardown(() => live.kill('SIGKILL'))
    const later: string[] = []
    for (const content of LATER) later.push(await addFact(live.url, content))
    await waitFor(
      'the second instance to embed the facts written through it',
      async () => (await facts()).filter((f) => later.includes(f.id)).every((f) => f.state === 'ready'),
      60_000
    )
    const meanwhile = await facts()
    t.ok(
      meanwhile.filter((f) => ids.includes(f.id)).every((f) => f.state === 'pending' && f.lease_owner === owner),
      "the first instance's facts are still its own while it lives"
    )
    t.notOk(
      upstream.answered.some((a) => a.input.some((text) => FACTS.includes(text))),
      'and nobody else sent them'
    )

    // killed in the middle of its call: nothing more is written by it, its lease runs out
    const leaseUntil = Math.max(...meanwhile.map((f) => Number(f.lease_ms ?? 0)))
    t.ok(doomed.kill('SIGKILL'), 'SIGKILL sent')
    t.equal(await doomed.exit, null, 'killed, not exited')
    const done = await waitFor(
      'every fact to be embedded',
      async () => {
        const all = await facts()
        return all.every((f) => f.state === 'ready') ? all : null
      },
      60_000
    )
    t.equal(done.length, FACTS.length + LATER.length, 'every fact written is there')
    t.ok(
      done.every((f) => f.embedding_queued && f.rows === 1 && f.current === true && f.lease_owner === null),
      'every fact taken in once, one row each, its vector made from its text, no lease left'
    )
    const counts = sentCounts(upstream.answered)
    t.same(
      [...counts.keys()].sort(),
      [...FACTS, ...LATER].sort(),
      'every fact was embedded by the live instance, and nothing else'
    )
    t.ok(
      [...counts.values()].every((n) => n === 1),
      'each exactly once'
    )
    const takenOver = upstream.answered.filter((a) => a.input.some((text) => FACTS.includes(text)))
    t.ok(
      takenOver.every((a) => a.at > leaseUntil),
      "the dead instance's facts were sent only after its lease ran out"
    )
    t.equal(upstream.held.length, 1, 'the dead instance made one call, never answered')
    live.kill('SIGTERM')
    await live.exit
  }
)

t.test(
  'the embedded database: a process killed mid-batch, the next one on its data directory embeds every fact once',
  { skip: process.env.DATABASE_URL ? 'the embedded database only (one process per data directory)' : false },
  async (t) => {
    const upstream = await startHoldingUpstream(t)
    const dataDir = tempDir(t, 'cairn-embed-kill-')
    const doomed = await startServer(instanceEnv(upstream.url, HELD_KEY, dataDir))
    t.teardown(() => doomed.kill('SIGKILL'))
    const ids: string[] = []
    for (const content of FACTS) ids.push(await addFact(doomed.url, content))
    await waitFor('the instance to call /v1/embeddings', async () => upstream.held.length > 0, 60_000)
    const heldTexts = upstream.held[0]!.input
    t.ok(
      heldTexts.length > 0 && heldTexts.every((text) => FACTS.includes(text)),
      'it took facts in and claimed them (its job waits on that one call: any others wait in the queue)'
    )
    t.ok(doomed.kill('SIGKILL'), 'SIGKILL sent')
    t.equal(await doomed.exit, null, 'killed, not exited')

    const next = await startServer(instanceEnv(upstream.url, LIVE_KEY, dataDir))
    t.teardown(() => next.kill('SIGKILL'))
    const browse = async () =>
      (
        (await (await fetch(`${next.url}/api/memory/browse?limit=100`)).json()) as {
          items: Array<{ id: string; embedding: string }>
        }
      ).items
    const done = await waitFor(
      'every fact to be embedded',
      async () => {
        const items = await browse()
        return items.length === FACTS.length && items.every((i) => i.embedding === 'ready') ? items : null
      },
      60_000
    )
    t.same(done.map((i) => i.id).sort(), ids.slice().sort(), 'every fact written, every one embedded')
    const counts = sentCounts(upstream.answered)
    t.same([...counts.keys()].sort(), [...FACTS].sort(), 'every fact sent by the next process, and nothing else')
    t.ok(
      [...counts.values()].every((n) => n === 1),
      'each exactly once'
    )
    t.equal(upstream.held.length, 1, 'the killed process made one call, never answered')
    next.kill('SIGTERM')
    await next.exit
  }
)
