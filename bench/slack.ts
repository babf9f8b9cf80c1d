// The Slack ingress's acknowledgement at 200 signed events/s (goal: p99 under 100 ms).
// Every request is an app_mention with its own event id and message ts, signed with the
// connected app's secret at the moment it is sent, so each one verifies, is stored and starts
// a run (echo, executing in the same process) whose reply the outbox posts to a local server
// speaking Slack's Web API. BENCH_DATABASE_URL (or DATABASE_URL) adds the Postgres row.
import { createHmac, randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:http'
import autocannon from 'autocannon'
import { benchPostgres, credentials, startServer, withDatabase } from './lib.js'

const RATE = Number(process.env.BENCH_SLACK_RATE ?? 200)
const TEAM = 'TBENCH'
const BOT_USER = 'UBENCHBOT'

/** The Web API calls the service makes: auth.test and chat.postMessage (counted). */
async function fakeSlack(token: string) {
  let posts = 0
  const server = createServer(async (req, res) => {
    for await (const _chunk of req) {
      /* drain */
    }
    const method = (req.url ?? '').replace(/^\/api\//, '')
    res.writeHead(200, { 'content-type': 'application/json' })
    if (req.headers.authorization !== `Bearer ${token}`)
      return res.end(JSON.stringify({ ok: false, error: 'invalid_auth' }))
    if (method === 'auth.test')
      return res.end(JSON.stringify({ ok: true, team_id: TEAM, team: 'bench', user_id: BOT_USER, bot_id: 'BBENCH' }))
    if (method === 'chat.postMessage') {
      posts++
      return res.end(
        JSON.stringify({ ok: true, ts: `${Math.floor(Date.now() / 1000)}.${String(posts).padStart(6, '0')}` })
      )
    }
    res.end(JSON.stringify({ ok: true, messages: [] }))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/api/`,
    posts: () => posts,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

async function ingress(label: string, env: Record<string, string>): Promise<string> {
  const botToken = `xoxb-${randomBytes(12).toString('hex')}`
  const signingSecret = randomBytes(16).toString('hex')
  const slack = await fakeSlack(botToken)
  const server = await startServer('bench/cairn-server.ts', {
    SLACK_API_URL: slack.url,
    SECRETS_KEY: randomBytes(32).toString('base64'),
    ...env
  })
  try {
    const { cookie } = await credentials(server.url)
    const connect = await fetch(`${server.url}/api/integrations/slack`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', cookie },
      body: JSON.stringify({ botToken, signingSecret, teamId: TEAM })
    })
    if (connect.status !== 200) throw new Error(`connect: ${connect.status} ${await connect.text()}`)
    let n = 0
    const run = (seconds: number) =>
      autocannon({
        url: `${server.url}/api/chatplatform/slack/events`,
        method: 'POST',
        connections: 20,
        overallRate: RATE,
        duration: seconds,
        requests: [
          {
            setupRequest: (req: Record<string, unknown>) => {
              n++
              const ts = `${Math.floor(Date.now() / 1000)}.${String(n).padStart(6, '0')}`
              const body = JSON.stringify({
                type: 'event_callback',
                team_id: TEAM,
                api_app_id: 'ABENCH',
                event_id: `EvBench${process.pid}x${n}`,
                event_time: Math.floor(Date.now() / 1000),
                event: {
                  type: 'app_mention',
                  user: 'UHUMAN',
                  text: `<@${BOT_USER}> benchmark question ${n}`,
                  ts,
                  channel: 'CBENCH',
                  event_ts: ts
                }
              })
              const timestamp = String(Math.floor(Date.now() / 1000))
              const signature = `v0=${createHmac('sha256', signingSecret).update(`v0:${timestamp}:${body}`).digest('hex')}`
              return {
                ...req,
                body,
                headers: {
                  'content-type': 'application/json',
                  'x-slack-request-timestamp': timestamp,
                  'x-slack-signature': signature
                }
              }
            }
          }
        ]
      } as never) as unknown as Promise<autocannon.Result>
    await run(Number(process.env.BENCH_WARMUP_SECONDS ?? 2))
    const postsBefore = slack.posts()
    const seconds = Number(process.env.BENCH_SECONDS ?? 8)
    const result = await run(seconds)
    const sent = result.requests.total
    // the replies of the measured events, given a few seconds to drain
    const deadline = Date.now() + 20_000
    while (slack.posts() - postsBefore < result['2xx'] && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 200))
    return `| ${label} | ${RATE} | ${Math.round(result.requests.average)} | ${result.latency.p50} | ${result.latency.p99} | ${result.latency.max} | ${sent} | ${result.non2xx} | ${result.errors + result.timeouts} | ${slack.posts() - postsBefore} |`
  } finally {
    await server.stop()
    await slack.close()
  }
}

export async function benchSlack(): Promise<string> {
  const rows = [
    await ingress('PGlite (embedded)', {}),
    // the ingress alone: nothing else in the process shares PGlite's one connection
    await ingress('PGlite, ingress only (no run workers, no outbox)', {
      RUN_WORKER_CONCURRENCY: '0',
      SLACK_OUTBOX: 'false'
    })
  ]
  if (benchPostgres) rows.push(await withDatabase(benchPostgres, (url) => ingress('Postgres', { DATABASE_URL: url })))
  return [
    `### Slack ingress: signed app_mention events at ${RATE}/s, each acknowledged after its run is stored (echo runs executing, replies posted)`,
    '',
    '| database | target events/s | acknowledged/s | p50 ms | p99 ms | max ms | sent | non-2xx | errors | replies posted |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    'Latency is autocannon\'s, corrected for coordinated omission at the fixed rate. Goal: p99 under 100 ms. "Replies posted" counts',
    "the measured events' replies that reached the local Slack server within 20 s of the end (the echo runs queue behind the load)."
  ].join('\n')
}
