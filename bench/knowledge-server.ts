// The real service plus seeded knowledge in the dev org: BENCH_CHUNKS chunks (in documents
// of 100 chunks, about 600 characters each) and BENCH_RECORDS records, inserted with
// INSERT … SELECT generate_series before the server listens.
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
  'refund',
  'quota',
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
  'region',
  'failover',
  'sandbox',
  'webhooks'
]
const SYLLABLES = [
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

const app = await buildApp({ config: loadConfig() })
const chunks = Number(process.env.BENCH_CHUNKS ?? 100_000)
const records = Number(process.env.BENCH_RECORDS ?? 1_000)
const started = Date.now()
const words = sql.raw(`array[${WORDS.map((w) => `'${w}'`).join(',')}]`)
const syllables = sql.raw(`array[${SYLLABLES.map((w) => `'${w}'`).join(',')}]`)
// a sentence: two common words (each about 2% of sentences) and a rarer made-up one (0.06%)
const sentence = (g: string, k: number) =>
  sql.raw(`'The ' || w[1 + (${g} * ${7 + k}) % 100] || ' of the ' || w[1 + (${g} * ${13 + k}) % 97] ||
  ' team depends on ' || s[1 + (${g} * ${31 + k}) % 37] || s[1 + (${g} * ${17 + k}) % 40] || ' during the ' || w[1 + (${g} * ${5 + k}) % 99] || ' review. '`)
const body = sql.join(
  [0, 1, 2, 3, 4, 5, 6, 7].map((k) => sentence('g', k)),
  sql.raw(' || ')
)
await app.db.execute(sql`
  insert into knowledge_documents (id, org_id, name, kind, content_type, size, sha256, state, chunk_count, attempts, max_attempts)
  select 'doc-' || d, ${DEV_ORG.id}, 'handbook-' || d || '.md', 'markdown', 'text/markdown', 60000, md5(d::text) || md5(d::text), 'ready', 100, 1, 3
  from generate_series(0, ${Math.ceil(chunks / 100) - 1}) d`)
await app.db.execute(sql`
  with vocab as (select ${words} as w, ${syllables} as s)
  insert into knowledge_chunks (id, org_id, document_id, idx, heading, text)
  select '0190' || lpad(to_hex(g), 12, '0'), ${DEV_ORG.id}, 'doc-' || (g / 100), g % 100,
         'Chapter ' || (g % 100 / 10) || ' > ' || w[1 + (g * 3) % 100], ${body} || 'See ticket ' || g || '.'
  from generate_series(0, ${chunks - 1}) g, vocab`)
await app.db.execute(sql`
  with vocab as (select ${words} as w, ${syllables} as s)
  insert into knowledge_records (id, org_id, title, body, tags, source)
  select '0191' || lpad(to_hex(g), 12, '0'), ${DEV_ORG.id}, 'Runbook: ' || w[1 + (g * 11) % 100] || ' ' || w[1 + (g * 19) % 97],
         ${body}, array['bench'], '{"kind":"manual"}'::jsonb
  from generate_series(0, ${records - 1}) g, vocab`)
await app.db.execute(sql`
  insert into knowledge_words (org_id, word)
  select distinct ${DEV_ORG.id}, w from knowledge_chunks, regexp_split_to_table(lower(heading || ' ' || text), '[^[:alnum:]]+') as w
  where length(w) between 3 and 32 and w ~ '[[:alpha:]]'
  on conflict do nothing`)
// the steady state autovacuum keeps on a real server (statistics and a current visibility
// map), and on the embedded database the service's own pass (src/db/maintenance.ts)
if (app.database.kind === 'pglite') await maintainEmbedded(app.db)
else
  for (const table of ['knowledge_chunks', 'knowledge_records', 'knowledge_words', 'knowledge_documents'])
    await app.db.execute(sql.raw(`vacuum analyze ${table}`))
process.stderr.write(`seeded ${chunks} chunks and ${records} records in ${Date.now() - started} ms\n`)
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
