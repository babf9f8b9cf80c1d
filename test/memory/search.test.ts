import t from 'tap'
import { sql } from 'drizzle-orm'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { rowsOf } from '../../src/db/client.js'
import { prefixQuery, RANKED_MATCHES } from '../../src/retrieval/memory-text.js'
import { buildTestApp } from '../helper.js'
import { addFacts, FAST } from './helpers.js'

const FACTS = [
  'We deploy the payments service with Kubernetes on Fridays',
  'The office coffee machine needs descaling monthly',
  'Kubernetes cluster credentials live in the vault',
  'Deploy freezes start on December 15',
  'The vault door code changes weekly',
  'Credentials for the staging database rotate quarterly'
]

t.test('search finds full-text hits, misspellings and short prefixes, best match first', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  await addFacts(app.db, DEV_ORG.id, 'org', '', FACTS)
  const search = async (q: string) => {
    const res = await app.inject({ method: 'GET', url: `/api/memory/search?q=${encodeURIComponent(q)}` })
    t.equal(res.statusCode, 200, q)
    return res.json().items as Array<{ content: string; score: number }>
  }
  const contents = async (q: string) => (await search(q)).map((i) => i.content)

  t.same(await contents('coffee machine'), ['The office coffee machine needs descaling monthly'], 'full text')
  t.same((await contents('deploying')).sort(), [FACTS[3], FACTS[0]].sort(), 'stemmed: deploying finds deploy')
  t.same((await contents('kubernets')).sort(), [FACTS[2], FACTS[0]].sort(), 'a misspelled word still finds its facts')
  t.same(
    await contents('cofee'),
    ['The office coffee machine needs descaling monthly'],
    'a misspelling, one letter short'
  )
  t.same((await contents('kube')).sort(), [FACTS[2], FACTS[0]].sort(), 'a short prefix')
  t.same(await contents('desc'), ['The office coffee machine needs descaling monthly'], 'a four-letter prefix')
  t.same(await contents('zebra'), [], 'nothing unrelated')

  const ranked = await search('vault credentials')
  t.equal(
    ranked[0]!.content,
    'Kubernetes cluster credentials live in the vault',
    'the fact with both words comes first'
  )
  for (let i = 1; i < ranked.length; i++) t.ok(ranked[i - 1]!.score >= ranked[i]!.score, 'ordered by score')

  const credentials = await search('credentials')
  t.equal(credentials.length, 2)
  t.ok(credentials.every((i) => i.score > 0))
})

t.test('prefix queries keep only letters and digits', async (t) => {
  t.equal(prefixQuery("kube's  deploy!"), 'kube:* & s:* & deploy:*')
  t.equal(prefixQuery("'); drop table x; --"), 'drop:* & table:* & x:*')
  t.equal(prefixQuery('!!! :* & |'), '')
  t.equal(prefixQuery('Übergröße café'), 'übergröße:* & café:*')
})

t.test('a query matching more than RANKED_MATCHES facts ranks the newest of them, or a page of them', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  // the oldest fact is the best full-text match for `alpha`; 250 newer ones match too (the
  // last is the newest). Two groups of ten match better than the rest: the 36th to 45th
  // newest (within RANKED_MATCHES + 1 = 51) and the 71st to 80th (past 51, within 101).
  t.equal(RANKED_MATCHES, 50)
  await addFacts(app.db, DEV_ORG.id, 'org', '', ['Alpha alpha alpha: the gamma rollout checklist'])
  const near = (i: number) => i >= 205 && i < 215
  const far = (i: number) => i >= 170 && i < 180
  const newer = Array.from({ length: 250 }, (_, i) =>
    near(i) || far(i) ? `Alpha alpha note ${i} about the deploy` : `Alpha note ${i} about the deploy`
  )
  const group = (keep: (i: number) => boolean) => new Set(newer.filter((_, i) => keep(i)))
  await addFacts(app.db, DEV_ORG.id, 'org', '', newer)
  const search = async (q: string, limit = 20) => {
    const res = await app.inject({ method: 'GET', url: `/api/memory/search?q=${encodeURIComponent(q)}&limit=${limit}` })
    t.equal(res.statusCode, 200, q)
    return res.json() as { truncated: boolean; items: Array<{ content: string }> }
  }
  // `alpha` is in every fact: the pool is walked newest first. One more match than is
  // ranked is read, so a full page can say truncated.
  for (const [limit, ranked, best] of [
    [20, 51, group(near)],
    [100, 101, group((i) => near(i) || far(i))]
  ] as const) {
    const common = await search('alpha', limit)
    t.equal(common.items.length, limit, `a page of ${limit}`)
    t.equal(common.truncated, true)
    t.notOk(
      common.items.some((i) => i.content.startsWith('Alpha alpha alpha')),
      'the old fact is past the newest matches'
    )
    const newest = new Set(newer.slice(-ranked))
    t.ok(
      common.items.every((i) => newest.has(i.content)),
      `every hit is one of the newest ${ranked} matches`
    )
    t.same(
      new Set(common.items.slice(0, best.size).map((i) => i.content)),
      best,
      `the better matches of the newest ${ranked} come first, and only those`
    )
  }
  // a rare word goes through the index, however old its facts are
  t.same(
    (await search('gamma')).items.map((i) => i.content),
    ['Alpha alpha alpha: the gamma rollout checklist']
  )
  t.same(
    (await search('gama')).items.map((i) => i.content),
    ['Alpha alpha alpha: the gamma rollout checklist'],
    'misspelled'
  )
  // with both words, the old fact is the only match and is found
  t.same(
    (await search('alpha checklist')).items.map((i) => i.content),
    ['Alpha alpha alpha: the gamma rollout checklist']
  )
})

t.test('cached search results are retired by every change to the pool, whichever instance makes it', async (t) => {
  const a = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' } })
  const b = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false' }, db: a.testDb })
  const pool = await addFacts(a.db, DEV_ORG.id, 'org', '', FACTS)
  const contents = async (q: string) => {
    const res = await a.inject({ method: 'GET', url: `/api/memory/search?q=${encodeURIComponent(q)}` })
    t.equal(res.statusCode, 200, q)
    return (res.json().items as Array<{ content: string }>).map((i) => i.content).sort()
  }
  const id = async (content: string) =>
    (
      await a.db
        .execute(sql`select id from memory_items where pool_id = ${pool.id} and content = ${content}`)
        .then((r) => rowsOf<{ id: string }>(r))
    )[0]!.id
  t.same(await contents('vault'), [FACTS[2], FACTS[4]].sort(), 'first search')

  // a change outside the pool's write paths does not move the generation: the cached answer stays
  await a.db.execute(
    sql`update memory_items set content = 'The vault door code changes daily' where pool_id = ${pool.id} and content = ${FACTS[4]}`
  )
  t.same(await contents('vault'), [FACTS[2], FACTS[4]].sort(), 'served from the cache')
  await a.db.execute(
    sql`update memory_items set content = ${FACTS[4]} where pool_id = ${pool.id} and content = 'The vault door code changes daily'`
  )

  const edited = await b.inject({
    method: 'PATCH',
    url: `/api/memory/item/${await id(FACTS[4]!)}`,
    payload: { content: 'The safe door code changes weekly' }
  })
  t.equal(edited.statusCode, 200, 'edited on the other instance')
  t.same(await contents('vault'), [FACTS[2]], 'an edit on another instance retires the cached answer')

  const removed = await b.inject({ method: 'DELETE', url: `/api/memory/item/${await id(FACTS[2]!)}` })
  t.equal(removed.statusCode, 200, 'deleted on the other instance')
  t.same(await contents('vault'), [], 'a delete retires it')

  await addFacts(b.db, DEV_ORG.id, 'org', '', ['The new vault opens at nine'])
  t.same(await contents('vault'), ['The new vault opens at nine'], 'a delivered capture retires it')
})

t.test('MEMORY_SEARCH_CACHE=0 reads the pool on every search', async (t) => {
  const app = await buildTestApp(t, { env: { ...FAST, MEMORY_CAPTURE_WORKER: 'false', MEMORY_SEARCH_CACHE: '0' } })
  const pool = await addFacts(app.db, DEV_ORG.id, 'org', '', FACTS)
  const contents = async (q: string) =>
    (await app.inject({ method: 'GET', url: `/api/memory/search?q=${q}` }))
      .json()
      .items.map((i: { content: string }) => i.content)
  t.same(await contents('coffee'), [FACTS[1]])
  await app.db.execute(
    sql`update memory_items set content = 'The office tea machine needs descaling monthly' where pool_id = ${pool.id} and content = ${FACTS[1]}`
  )
  t.same(await contents('coffee'), [], 'the change is seen at once')
})
