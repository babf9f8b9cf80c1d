// The real service plus BENCH_RUNS finished runs of the dev org spread over the last 365
// days, inserted with INSERT … SELECT generate_series before the server listens: the
// trigger on runs keeps the usage rollup as it would for runs finishing one by one.
import { sql } from 'drizzle-orm'
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { loadConfig } from '../src/config.js'

const app = await buildApp({ config: loadConfig() })
const total = Number(process.env.BENCH_RUNS ?? 1_000_000)
const started = Date.now()
const span = 365 * 86_400
const CHUNK = 50_000
for (let from = 1; from <= total; from += CHUNK) {
  const to = Math.min(total, from + CHUNK - 1)
  // 2 engines, 3 models of one of them, 5 users and none; 90% succeed, 7% fail, 3% are cancelled
  await app.db.execute(sql`
    insert into runs (id, org_id, root_run_id, engine, model, prompt, status, origin, user_id, created_at, started_at, finished_at, input_tokens, output_tokens)
    select id, ${DEV_ORG.id}, id, case when g % 2 = 0 then 'echo' else 'openai' end,
           case when g % 2 = 0 then null else 'model-' || (g % 3) end, 'bench',
           case when g % 100 < 90 then 'succeeded' when g % 100 < 97 then 'failed' else 'cancelled' end,
           'api', case when g % 6 = 0 then null else 'user-' || (g % 6) end,
           t - interval '2 seconds', t - interval '2 seconds', t, 100 + g % 50, 200 + g % 70
    from (select g, t,
                 -- a UUIDv7 of the run's time, as newId() makes (the dashboard's last24h reads ids)
                 substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || lpad(to_hex(g % 4096), 3, '0') || '-8' ||
                 lpad(to_hex((g / 4096) % 4096), 3, '0') || '-' || lpad(to_hex(g), 12, '0') as id
          from (select g, t, lpad(to_hex((extract(epoch from t - interval '2 seconds') * 1000)::bigint), 12, '0') as h
                from (select g, now() - make_interval(secs => (g::float8 * ${span}::float8 / ${total}::float8)) as t
                      from generate_series(${from}::int, ${to}::int) g) times) hexed) s`)
}
// a year of runs finishing a few a minute leaves the rollup at about its live size (each
// row is updated for an hour at most, then autovacuum reclaims what it left); a million
// upserts in one minute leave it 30 times larger until VACUUM FULL
for (const table of ['usage_hours', 'usage_hour_groups', 'usage_slot_groups'])
  await app.db.execute(sql.raw(`vacuum full analyze ${table}`))
process.stderr.write(`seeded ${total} finished runs in ${Date.now() - started} ms\n`)
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
