import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { plainWords, rewritePlainWords, snippetHtml } from '../../src/retrieval/knowledge-search.js'
import { multipart } from '../artifacts/helpers.js'
import { buildTestApp, mintKey, secondHandle, signUpWithOrg, waitFor } from '../helper.js'

type App = Awaited<ReturnType<typeof buildTestApp>>

interface Hit {
  kind: string
  id: string
  recordId: string | null
  documentId: string | null
  title: string
  snippet: string
  score: number
}

async function record(
  app: App,
  title: string,
  body: string,
  headers: Record<string, string> = {},
  tags: string[] = []
) {
  const res = await app.inject({ method: 'POST', url: '/api/knowledge', payload: { title, body, tags }, headers })
  if (res.statusCode !== 201) throw new Error(`${res.statusCode} ${res.body}`)
  return res.json().record.id as string
}

async function search(app: App, query: string, headers: Record<string, string> = {}) {
  const res = await app.inject({
    method: 'GET',
    url: `/api/knowledge/search?${new URLSearchParams({ q: query })}`,
    headers
  })
  if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${res.body}`)
  return res.json() as { items: Hit[]; truncated: boolean; latencyMs: number }
}

const titles = (r: { items: Hit[] }) => r.items.map((h) => h.title).sort()

t.test('search: web search syntax, ranking, phrases and exclusions', async (t) => {
  const app = await buildTestApp(t)
  await record(app, 'Postgres backups', 'Take a base backup with pg_basebackup every night, then archive the WAL.')
  await record(app, 'Redis backups', 'Redis writes an RDB snapshot; copy it off the machine.')
  await record(app, 'Incident review', 'The night shift found the backup job had stopped.')
  await record(
    app,
    'Backup policy',
    'Backups are kept for thirty days. Backups are tested monthly. Every backup is encrypted.'
  )

  const all = await search(app, 'backup')
  t.same(
    titles(all),
    ['Backup policy', 'Incident review', 'Postgres backups', 'Redis backups'],
    'stems: backups, backup'
  )
  t.equal(all.items[0]!.title, 'Backup policy', 'the title and repeated matches rank first')
  t.ok(
    all.items.every((h, i) => i === 0 || all.items[i - 1]!.score >= h.score),
    'best first'
  )
  t.equal(all.truncated, false)
  t.type(all.latencyMs, 'number')
  t.match(all.items[0], { kind: 'record', recordId: all.items[0]!.id, documentId: null })

  t.same(
    titles(await search(app, 'backup -redis')),
    ['Backup policy', 'Incident review', 'Postgres backups'],
    'exclusion'
  )
  t.same(titles(await search(app, '"base backup"')), ['Postgres backups'], 'phrase')
  t.same(titles(await search(app, '"backup base"')), [], 'a phrase is in order')
  t.same(titles(await search(app, 'snapshot or encrypted')), ['Backup policy', 'Redis backups'], 'or')
  t.same(titles(await search(app, 'night backup')), ['Incident review', 'Postgres backups'], 'every word')

  const two = (await app.inject({ method: 'GET', url: '/api/knowledge/search?q=backup&limit=2' })).json()
  t.equal(two.items.length, 2)
  t.equal(two.truncated, true)
})

t.test(
  'search: a misspelled word still finds its record, and the correction keeps quotes and exclusions',
  async (t) => {
    const app = await buildTestApp(t)
    await record(app, 'Kubernetes upgrades', 'Drain each node before upgrading the kubelet.')
    await record(app, 'Kubernetes ingress', 'The ingress controller terminates TLS.')
    t.same(titles(await search(app, 'kubernets')), ['Kubernetes ingress', 'Kubernetes upgrades'])
    t.same(titles(await search(app, 'kubernets -ingress')), ['Kubernetes upgrades'])
    t.same(titles(await search(app, 'kubelett drain')), ['Kubernetes upgrades'])
    t.same(titles(await search(app, 'zzzzqqqq')), [], 'nothing near: nothing found')
  }
)

t.test('search: snippets are escaped HTML with <mark> around matches and nothing else', async (t) => {
  const app = await buildTestApp(t)
  await record(
    app,
    '<b>Bold</b> title',
    'Never run <script>alert("owned")</script> from a wiki & always review the deploy script\u0002.'
  )
  const { items } = await search(app, 'script')
  t.equal(items.length, 1)
  const snippet = items[0]!.snippet
  t.notMatch(snippet, /<(?!\/?mark>)/, 'no tag but mark')
  t.match(
    snippet,
    /<mark>script<\/mark>&gt;alert\(&quot;owned&quot;\)&lt;\/(<mark>)?script(<\/mark>)?&gt;/,
    'the tag shows as text'
  )
  t.match(snippet, /&amp; always/)
  t.notOk(snippet.includes('\u0002') || snippet.includes('\u0003'), 'the markers never leak')
  t.equal(items[0]!.title, '<b>Bold</b> title', 'titles are data (JSON), not HTML')
})

t.test('search: tags narrow to records; orgs never see each other; keys search', async (t) => {
  const app = await buildTestApp(t)
  const a = await signUpWithOrg(app)
  const b = await signUpWithOrg(app)
  await record(app, 'Alpha secret plan', 'The launch code is tangerine.', { cookie: a.cookie }, ['plans'])
  await record(app, 'Alpha memo', 'Lunch is tangerine flavoured.', { cookie: a.cookie })
  await record(app, 'Beta notes', 'Nothing about fruit.', { cookie: b.cookie })
  t.same(titles(await search(app, 'tangerine', { cookie: b.cookie })), [])
  t.same(titles(await search(app, 'tangarine', { cookie: b.cookie })), [], 'nor through the typo fallback')
  t.same(titles(await search(app, 'tangerine', { cookie: a.cookie })), ['Alpha memo', 'Alpha secret plan'])
  const tagged = (
    await app.inject({
      method: 'GET',
      url: '/api/knowledge/search?q=tangerine&tag=plans',
      headers: { cookie: a.cookie }
    })
  ).json()
  t.same(
    tagged.items.map((h: Hit) => h.title),
    ['Alpha secret plan']
  )
  const key = await mintKey(app, a.cookie)
  t.same(titles(await search(app, 'tangerine', { authorization: key.authorization })), [
    'Alpha memo',
    'Alpha secret plan'
  ])
  t.same(titles(await search(app, 'tangerine')), [], 'the dev org is an org too')
})

t.test('search: bad queries are 400s', async (t) => {
  const app = await buildTestApp(t)
  for (const qs of ['', 'q=', 'q=x&limit=0', 'q=x&limit=101', `q=${'x'.repeat(501)}`, 'q=x&tag=']) {
    const res = await app.inject({ method: 'GET', url: `/api/knowledge/search?${qs}` })
    t.equal(res.statusCode, 400, qs)
  }
  // only stop words or punctuation: a valid query that matches nothing
  t.same((await search(app, 'the and -')).items, [])
  t.same((await search(app, '"unclosed quote')).items, [])
})

t.test('search helpers', async (t) => {
  t.same(plainWords('deploy "exact phrase" -excluded or kubernetes x1 a'), ['deploy', 'kubernetes'])
  t.equal(
    rewritePlainWords('kubernets "kubernets" -kubernets or Kubernets', new Map([['kubernets', 'kubernetes']])),
    'kubernetes "kubernets" -kubernets or kubernetes'
  )
  t.equal(snippetHtml('a \u0002&lt;x&gt;\u0003 &amp; <b>'), 'a <mark>&lt;x&gt;</mark> &amp; &lt;b&gt;')
})

t.test('search: cached answers never outlive a change, on any instance', async (t) => {
  // two instances share the database and, as the fs blob store requires, the data directory
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-two-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const a = await buildTestApp(t, { env: { KNOWLEDGE_POLL_MS: '50', DATA_DIR: dataDir } })
  const b = await buildTestApp(t, {
    db: await secondHandle(t, a.testDb),
    env: { KNOWLEDGE_POLL_MS: '50', DATA_DIR: dataDir }
  })
  const id = await record(a, 'Pager rota', 'The quokka team carries the pager.')
  t.same(titles(await search(a, 'quokka')), ['Pager rota'])
  t.same(titles(await search(a, 'quokka')), ['Pager rota'], 'served again (from the cache)')
  const { version } = (await b.inject({ method: 'GET', url: `/api/knowledge/${id}` })).json().record
  t.equal(
    (
      await b.inject({
        method: 'PATCH',
        url: `/api/knowledge/${id}`,
        payload: { body: 'The wombat team carries the pager.', version }
      })
    ).statusCode,
    200
  )
  t.same(titles(await search(a, 'quokka')), [], 'a change made through the other instance retires the cached answer')
  t.same(titles(await search(a, 'wombat')), ['Pager rota'])
  t.same(titles(await search(a, 'wombatt')), ['Pager rota'], 'the vocabulary moved on too')
  t.equal((await b.inject({ method: 'DELETE', url: `/api/knowledge/${id}` })).statusCode, 204)
  t.same(titles(await search(a, 'wombat')), [])
  // a document made ready by a worker retires cached answers too
  t.same(titles(await search(a, 'platypus')), [])
  const form = multipart({ filename: 'zoo.md', type: 'text/markdown', bytes: '# Zoo\n\nThe platypus lays eggs.' })
  const doc = (
    await b.inject({ method: 'POST', url: '/api/knowledge/documents', payload: form.payload, headers: form.headers })
  ).json().document
  await waitFor(
    'the document',
    async () =>
      (await a.inject({ method: 'GET', url: `/api/knowledge/documents/${doc.id}` })).json().document.state === 'ready'
  )
  t.same(titles(await search(a, 'platypus')), ['zoo.md > Zoo'])
  t.equal((await a.inject({ method: 'DELETE', url: `/api/knowledge/documents/${doc.id}` })).statusCode, 204)
  t.same(titles(await search(b, 'platypus')), [])
})
