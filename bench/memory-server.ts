// The real service plus a seeded memory pool: BENCH_FACTS facts in the dev org's pool,
// inserted with one INSERT … SELECT generate_series before the server listens.
import { sql } from 'drizzle-orm'
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { loadConfig } from '../src/config.js'
import { maintainEmbedded } from '../src/db/maintenance.js'

const WORDS = [
  'deploy',
  'kubernetes',
  'invoice',
  'customer',
  'release',
  'database',
  'backup',
  'vault',
  'credentials',
  'staging',
  'payments',
  'latency',
  'incident',
  'oncall',
  'runbook',
  'terraform',
  'migration',
  'frontend',
  'webhook',
  'billing',
  'rotation',
  'cluster',
  'monitoring',
  'alerting',
  'dashboard',
  'pipeline',
  'artifact',
  'registry',
  'firewall',
  'gateway',
  'timeout',
  'retry',
  'queue',
  'worker',
  'scheduler',
  'cache',
  'redis',
  'postgres',
  'index',
  'search',
  'marketing',
  'contract',
  'vendor',
  'budget',
  'quarter',
  'roadmap',
  'design',
  'review',
  'meeting',
  'standup',
  'laptop',
  'office',
  'coffee',
  'parking',
  'holiday',
  'travel',
  'expense',
  'hiring',
  'interview',
  'onboarding',
  'password',
  'session',
  'token',
  'certificate',
  'domain',
  'email',
  'calendar',
  'support',
  'ticket',
  'escalation',
  'compliance',
  'audit',
  'privacy',
  'encryption',
  'policy',
  'training',
  'license',
  'renewal',
  'invoice',
  'refund',
  'mobile',
  'android',
  'iphone',
  'browser',
  'chrome',
  'safari',
  'layout',
  'accessibility',
  'translation',
  'locale',
  'analytics',
  'report',
  'export',
  'import',
  'schema',
  'tenant',
  'quota',
  'limit',
  'region',
  'failover'
]

const app = await buildApp({ config: loadConfig() })
const facts = Number(process.env.BENCH_FACTS ?? 100_000)
const started = Date.now()
const words = sql.raw(`array[${WORDS.map((w) => `'${w}'`).join(',')}]`)
await app.db.execute(
  sql`insert into memory_pools (id, org_id, scope, owner_key) values ('bench-pool', ${DEV_ORG.id}, 'org', '') on conflict do nothing`
)
// Two common words from a list of 100 (each in about 2% of facts) and four rarer ones from
// 1,600 made of two syllables (each in about 0.25%): a team's facts share some words, not all.
const SYLLABLES = sql.raw(
  `array[${[
    'ka',
    'lo',
    'mi',
    'ne',
    'po',
    'ru',
    'sa',
    'ti',
    'vo',
    'ze',
    'bri',
    'cal',
    'dor',
    'fen',
    'gil',
    'har',
    'jun',
    'kel',
    'lum',
    'mor',
    'nax',
    'orb',
    'pel',
    'quin',
    'ras',
    'sol',
    'tor',
    'ulm',
    'ven',
    'wex',
    'yar',
    'zon',
    'ber',
    'cin',
    'dax',
    'eph',
    'fro',
    'gan',
    'hux',
    'ith'
  ]
    .map((w) => `'${w}'`)
    .join(',')}]`
)
await app.db.execute(sql`
  insert into memory_items (id, org_id, pool_id, content, content_hash, source_run_id, root_run_id, created_at, updated_at)
  select '0190' || lpad(to_hex(g), 12, '0'), ${DEV_ORG.id}, 'bench-pool',
         'Fact ' || g || ': the ' || (${words})[1 + (g * 7) % 100] || ' ' || (${words})[1 + (g * 13) % 97] ||
         ' for ' || (${SYLLABLES})[1 + (g * 31) % 37] || (${SYLLABLES})[1 + (g * 17) % 40] || ' uses ' ||
         (${SYLLABLES})[1 + (g * 53) % 39] || (${SYLLABLES})[1 + (g * 11) % 40] || ' and ' ||
         (${SYLLABLES})[1 + (g * 101) % 38] || (${SYLLABLES})[1 + (g * 3) % 40] || ' near ' ||
         (${SYLLABLES})[1 + (g * 29) % 40] || (${SYLLABLES})[1 + (g * 5) % 39] || ', see ticket ' || g,
         md5(g::text), 'bench-run', 'bench-run', now(), now()
  from generate_series(1, ${facts}) g
  on conflict do nothing`)
await app.db.execute(sql`
  insert into memory_words (pool_id, word)
  select distinct 'bench-pool', w
  from memory_items, regexp_split_to_table(lower(content), '[^[:alnum:]]+') as w
  where pool_id = 'bench-pool' and length(w) between 3 and 32 and w ~ '[[:alpha:]]'
  on conflict do nothing`)
await app.db.execute(
  sql`update memory_pools set item_count = (select count(*) from memory_items where pool_id = 'bench-pool') where id = 'bench-pool'`
)
// the steady state autovacuum keeps on a real server (statistics and a current visibility
// map), and on the embedded database the service's own pass (src/db/maintenance.ts)
if (app.database.kind === 'pglite') {
  await maintainEmbedded(app.db)
} else {
  await app.db.execute(sql`vacuum analyze memory_items`)
  await app.db.execute(sql`vacuum analyze memory_words`)
}
process.stderr.write(`seeded ${facts} facts in ${Date.now() - started} ms\n`)
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
