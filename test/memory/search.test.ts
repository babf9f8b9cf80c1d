import t from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { prefixQuery } from '../../src/memory/postgres-pool.js'
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
    return (res.json().items as Array<{ content: string; score: number }>)
  }
  const contents = async (q: string) => (await search(q)).map((i) => i.content)

  t.same(await contents('coffee machine'), ['The office coffee machine needs descaling monthly'], 'full text')
  t.same((await contents('deploying')).sort(), [FACTS[3], FACTS[0]].sort(), 'stemmed: deploying finds deploy')
  t.same((await contents('kubernets')).sort(), [FACTS[2], FACTS[0]].sort(), 'a misspelled word still finds its facts')
  t.same(await contents('cofee'), ['The office coffee machine needs descaling monthly'], 'a misspelling, one letter short')
  t.same((await contents('kube')).sort(), [FACTS[2], FACTS[0]].sort(), 'a short prefix')
  t.same(await contents('desc'), ['The office coffee machine needs descaling monthly'], 'a four-letter prefix')
  t.same(await contents('zebra'), [], 'nothing unrelated')

  const ranked = await search('vault credentials')
  t.equal(ranked[0]!.content, 'Kubernetes cluster credentials live in the vault', 'the fact with both words comes first')
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
