// The real service with 100,000 embedded facts in ten pools of 10,000 (the dev org's pool and
// nine other orgs'), embedded by the built-in offline embedder before the server listens.
// BENCH_EMBED_TRIGGERS=off turns the embedding triggers and queue off (the write path as it
// was before search by meaning), for the write-path comparison.
import { sql } from 'drizzle-orm'
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { loadConfig } from '../src/config.js'
import { maintainEmbedded } from '../src/db/maintenance.js'

const TOPICS = [
  'the billing service deploys from the release branch',
  'pager duty on weekends is handled by the platform team',
  'customer data is stored in the primary database cluster',
  'the coffee machine on the second floor needs cleaning',
  'expense claims need approval from a director',
  'kubernetes credentials are kept in the vault',
  'new laptops are handed out by the IT desk',
  'the staging environment is reset every night',
  'security patches reach production within two days',
  'invoices are sent to clients at the start of the month'
]
const app = await buildApp({ config: loadConfig() })
const perPool = Number(process.env.BENCH_POOL_FACTS ?? 10_000)
const pools = Number(process.env.BENCH_POOLS ?? 10)
const started = Date.now()
// (a database shared by two cases keeps what the first one set: say it every time)
const off = process.env.BENCH_EMBED_TRIGGERS === 'off'
for (const trigger of ['memory_items_embed_update', 'memory_items_embed_delete'])
  await app.db.execute(sql.raw(`alter table memory_items ${off ? 'disable' : 'enable'} trigger ${trigger}`))
// a new fact waits for the embedding job in a partial index; written as taken in, it is not in it
await app.db.execute(sql.raw(`alter table memory_items alter column embedding_queued set default ${off}`))
for (let p = 0; p < pools; p++) {
  const orgId = p === 0 ? DEV_ORG.id : `bench-org-${p}`
  if (p > 0)
    await app.db.execute(
      sql`insert into organizations (id, name, slug) values (${orgId}, ${orgId}, ${orgId}) on conflict do nothing`
    )
  const poolId = `bench-pool-${p}`
  await app.db.execute(
    sql`insert into memory_pools (id, org_id, scope, owner_key) values (${poolId}, ${orgId}, 'org', '') on conflict do nothing`
  )
  const topics = sql.raw(`array[${TOPICS.map((w) => `'${w}'`).join(',')}]`)
  await app.db.execute(sql`
    insert into memory_items (id, org_id, pool_id, content, content_hash, source_run_id, root_run_id)
    select '0190' || lpad(to_hex(${p * perPool} + g), 12, '0'), ${orgId}, ${poolId},
           'Note ' || g || ': ' || (${topics})[1 + g % 10] || ', ticket ' || (g * 7919) % 100000,
           md5(${p}::text || '/' || g::text), 'bench-run', 'bench-run'
    from generate_series(1, ${perPool}) g
    on conflict do nothing`)
  await app.db.execute(sql`
    insert into memory_words (pool_id, word)
    select distinct ${poolId}, w
    from memory_items, regexp_split_to_table(lower(content), '[^[:alnum:]]+') as w
    where pool_id = ${poolId} and length(w) between 3 and 32 and w ~ '[[:alpha:]]'
    on conflict do nothing`)
  await app.db.execute(
    sql`update memory_pools set item_count = (select count(*) from memory_items where pool_id = ${poolId}) where id = ${poolId}`
  )
}
let embedded = 0
if (app.retrieval.worker && process.env.BENCH_EMBED_TRIGGERS !== 'off') {
  for (let n = await app.retrieval.worker.runOnce(); n > 0; n = await app.retrieval.worker.runOnce()) embedded += n
}
if (app.database.kind === 'pglite') {
  await maintainEmbedded(app.db)
} else {
  for (const table of ['memory_items', 'memory_words', 'embeddings'])
    await app.db.execute(sql.raw(`vacuum analyze ${table}`))
}
process.stderr.write(`seeded ${pools * perPool} facts (${embedded} embedded) in ${Date.now() - started} ms\n`)
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
