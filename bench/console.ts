// The console's thread page: a conversation of 100 tool-using turns (runs made through the
// real API: a local model asks for a shell command, gets its output, answers; BENCH_TOOLS=0
// for echo runs, prompt and answer only), loaded cold in Debian's Chromium (a fresh browser
// context each time: no cache, no cookies) until its last turn is rendered, and the
// JavaScript the page loads. The same for a thread of 10 such turns: the page's requests must
// not grow with the thread (its tool calls come from the transcripts in the thread's one read,
// not from event history). The server is the real service in its own process
// (bench/cairn-server.ts), on PGlite, and on Postgres when BENCH_DATABASE_URL or
// DATABASE_URL names one. BENCH_TRACE=1 prints each load's resource timings.
import { gzipSync } from 'node:zlib'
import { chromium, type Browser } from 'playwright-core'
import { ensureHubBuild } from '../scripts/build-hub.mjs'
import { benchPostgres, credentials, startServer, withDatabase } from './lib.js'
import { startBenchModel } from './model.js'

// page-side callbacks run in the browser; this program has Node's types, not the DOM's
declare const performance: {
  now(): number
  getEntriesByType(type: 'resource'): Array<{ name: string; responseEnd: number; startTime: number }>
}
declare const window: { __lastTurn?: number }
declare const document: { querySelector(selector: string): unknown }
declare class MutationObserver {
  constructor(callback: () => void)
  observe(target: unknown, options: { childList: boolean; subtree: boolean; characterData: boolean }): void
  disconnect(): void
}

const TURNS = Number(process.env.BENCH_TURNS ?? 100)
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 15)
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const TOOLS = process.env.BENCH_TOOLS !== '0'
const SMALL = 10

/** Nearest rank: the value at `share` of the sorted samples. */
const percentile = (xs: number[], share: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(share * s.length) - 1)]!
}
const ms = (x: number) => `${Math.round(x)}`
const kb = (bytes: number) => (bytes / 1024).toFixed(1)

const SENTENCES = [
  'The staging deploy failed on the database migration step; the logs mention a lock timeout on the runs table.',
  'Please summarise what changed in the billing service since the last release and who reviewed it.',
  'The on-call runbook says to fail over to the second region when the error rate stays above five percent for ten minutes.',
  'Draft a short note to the customer explaining that the invoice export will be fixed in the next patch release.',
  'Which of the open incidents touch the payments gateway, and are any of them waiting on another team?'
]

/**
 * A local OpenAI-compatible model: a turn's prompt gets a shell call (a command printing a sentence), its result an
 * answer.
 */
function startToolModel() {
  let calls = 0
  return startBenchModel(({ messages }) => {
    const last = messages[messages.length - 1]!
    if (last.role === 'user') {
      const call = {
        index: 0,
        id: `call_${++calls}`,
        type: 'function',
        function: {
          name: 'shell',
          arguments: JSON.stringify({ command: `echo '${SENTENCES[calls % SENTENCES.length]}'` })
        }
      }
      return [{ delta: { role: 'assistant', content: 'Let me look.', tool_calls: [call] }, finish: 'tool_calls' }]
    }
    return [{ delta: { content: `The command printed: ${(last.content ?? '').slice(0, 200)}` }, finish: 'stop' }]
  })
}

/**
 * A thread of `turns` runs made through the API, each awaited before the next (with the echo engine, its outputs are
 * the echo of its prompt).
 */
async function seedThread(url: string, turns: number): Promise<string> {
  const json = { 'content-type': 'application/json' }
  let rootRunId: string | undefined
  for (let i = 0; i < turns; i++) {
    const prompt = `Turn ${i + 1}. ${SENTENCES[i % SENTENCES.length]} ${SENTENCES[(i * 3 + 1) % SENTENCES.length]}`
    const res = await fetch(`${url}/api/runs`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ prompt, ...(TOOLS ? {} : { engine: 'echo' }), ...(rootRunId ? { rootRunId } : {}) })
    })
    if (res.status !== 201) throw new Error(`POST /api/runs: ${res.status} ${await res.text()}`)
    const { run } = (await res.json()) as { run: { id: string; rootRunId: string } }
    rootRunId = run.rootRunId
    const done = (await (await fetch(`${url}/api/runs/${run.id}?wait=30`)).json()) as {
      run: { status: string; output: string | null }
    }
    if (done.run.status !== 'succeeded' || !done.run.output) throw new Error(`turn ${i + 1} ended ${done.run.status}`)
  }
  return rootRunId!
}

interface Sample {
  lastTurn: number
  threadAnswered: number
  scriptBytes: number
  scriptGzip: number
  scripts: number
  apiCalls: number
  /** event streams the page opened (none: a finished thread's history is its one read) */
  streams: number
}

/**
 * One cold load of /hub/threads/:id in a fresh context: ms from the navigation's start
 * (the page's own clock) until the last turn's answer is in the document, and what the
 * page fetched to get there.
 */
async function coldLoad(browser: Browser, url: string, rootRunId: string, turns = TURNS): Promise<Sample> {
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } })
  try {
    const page = await context.newPage()
    await page.addInitScript((turns: number) => {
      const done = () => document.querySelector(`ol.conversation > li.turn:nth-child(${turns}) .output`)
      const observer = new MutationObserver(() => {
        if (window.__lastTurn === undefined && done()) {
          window.__lastTurn = performance.now()
          observer.disconnect()
        }
      })
      observer.observe(document, { childList: true, subtree: true, characterData: true })
    }, turns)
    const scripts: Buffer[] = []
    const bodies: Array<Promise<void>> = []
    let apiCalls = 0
    let streams = 0
    page.on('request', (request) => {
      if (/\/(thread-)?events$/.test(new URL(request.url()).pathname)) streams++
    })
    page.on('response', (response) => {
      const type = response.request().resourceType()
      if (type === 'script')
        bodies.push(
          response.body().then((b) => {
            scripts.push(b)
          })
        )
      if (new URL(response.url()).pathname.startsWith('/api/')) apiCalls++
    })
    await page.goto(`${url}/hub/threads/${rootRunId}`)
    await page.locator(`ol.conversation > li.turn:nth-child(${turns}) .output`).waitFor()
    if (TOOLS) await page.locator(`ol.conversation > li.turn:nth-child(${turns}) .tool-result`).waitFor()
    const at = await page.evaluate(() => {
      let thread = 0
      const parts: string[] = []
      for (const e of performance.getEntriesByType('resource')) {
        if (e.name.includes('/api/threads/')) thread = e.responseEnd
        parts.push(`${e.name.replace(/^https?:\/\/[^/]+/, '')} ${Math.round(e.startTime)}-${Math.round(e.responseEnd)}`)
      }
      return { lastTurn: window.__lastTurn ?? performance.now(), thread, parts }
    })
    await Promise.all(bodies)
    if (process.env.BENCH_TRACE) process.stderr.write(`${Math.round(at.lastTurn)}: ${at.parts.join(', ')}\n`)
    const all = Buffer.concat(scripts)
    return {
      lastTurn: at.lastTurn,
      threadAnswered: at.thread,
      scriptBytes: all.length,
      scriptGzip: gzipSync(all).length,
      scripts: scripts.length,
      apiCalls,
      streams
    }
  } finally {
    await context.close()
  }
}

async function measure(label: string, env: Record<string, string>): Promise<{ row: string; js: Sample }> {
  const model = TOOLS ? await startToolModel() : null
  // (a loaded machine can take over a minute to start the server: BENCH_READY_TIMEOUT_MS)
  const server = await startServer(
    'bench/cairn-server.ts',
    {
      ECHO_WORD_DELAY_MS: '0',
      RUN_POLL_MS: '50',
      MEMORY_CAPTURE_WORKER: 'false',
      ...(model ? { OPENAI_BASE_URL: model.url, MODELS: 'bench-model', SANDBOX_UNCONFINED: 'true' } : {}),
      ...env
    },
    Number(process.env.BENCH_READY_TIMEOUT_MS ?? 60_000)
  )
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync'
    ]
  })
  try {
    if (model) {
      // the shell runs without asking a person
      const policy = await fetch(`${server.url}/api/tools/policies/shell`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ mode: 'auto' })
      })
      if (!policy.ok) throw new Error(`shell policy: ${policy.status}`)
    }
    const seeded = Date.now()
    const small = await seedThread(server.url, SMALL)
    const rootRunId = await seedThread(server.url, TURNS)
    process.stderr.write(`${label}: seeded ${TURNS} turns through the API in ${Date.now() - seeded} ms\n`)
    await coldLoad(browser, server.url, rootRunId) // warm-up: the server's first queries, Chromium's first page
    const samples: Sample[] = []
    for (let i = 0; i < SAMPLES; i++) samples.push(await coldLoad(browser, server.url, rootRunId))
    const last = samples.map((s) => s.lastTurn)
    const thread = samples.map((s) => s.threadAnswered)
    const few: Sample[] = []
    for (let i = 0; i < SAMPLES; i++) few.push(await coldLoad(browser, server.url, small, SMALL))
    const fewLast = few.map((s) => s.lastTurn)
    const row = `| ${label} | ${ms(percentile(last, 0.5))} | ${ms(percentile(last, 0.95))} | ${ms(Math.max(...last))} | ${ms(percentile(thread, 0.5))} | ${samples[0]!.apiCalls} (${SMALL} turns: ${few[0]!.apiCalls}) | ${samples[0]!.streams} | ${(percentile(last, 0.5) / percentile(fewLast, 0.5)).toFixed(2)} |`
    return { row, js: samples[0]! }
  } finally {
    await browser.close()
    await server.stop()
    await model?.close()
  }
}

// ---- the admin's pages over a busy organization ------------------------------------

const RECORDS = Number(process.env.BENCH_RECORDS ?? 1000)
const SKILLS = Number(process.env.BENCH_SKILLS ?? 100)
const AUTOMATIONS = Number(process.env.BENCH_AUTOMATIONS ?? 100)
const DOCUMENTS = Number(process.env.BENCH_DOCUMENTS ?? 20)
const KEYS = Number(process.env.BENCH_KEYS ?? 100)
const MEMBERS = Number(process.env.BENCH_MEMBERS ?? 25)
const PROVIDERS = Number(process.env.BENCH_PROVIDERS ?? 10)
const SECRETS = Number(process.env.BENCH_SECRETS ?? 50)
const POLICIES = ['shell', 'read_file', 'write_file', 'list_files', 'write_artifact', 'knowledge_search']

/**
 * Each admin page with the selector that shows its list drawn (a full first page of 20). The baseline is the
 * organization page, which lists nothing: the same bundle, identity request and layout, no list.
 */
const ADMIN_PAGES: Array<[name: string, path: string, ready: string]> = [
  ['Organization (baseline: no list)', '/hub/organization', 'h1#org-title'],
  ['Knowledge', '/hub/knowledge', 'main:has(li.record:nth-child(20)):has(li.document:nth-child(20))'],
  ['Skills', '/hub/skills', 'li.skill:nth-child(20)'],
  ['Automations', '/hub/automations', 'main:has(li.automation:nth-child(20)):has(.next-runs li:nth-child(5))']
]

/**
 * The pages of a signed-in owner's busy organization (the API keys are a signed-in person's: the dev org has none to
 * list), each with what shows it whole: every provider and the default model, every key and member, the tool policies
 * and every secret. Its baseline is the same organization page, signed in.
 */
const SIGNED_IN_PAGES: Array<[name: string, path: string, ready: string]> = [
  ['Organization, signed in (baseline: no list)', '/hub/organization', 'h1#org-title'],
  ['Models', '/hub/models', `main:has(#default-model):has(ul[aria-label="Providers"] li:nth-child(${PROVIDERS}))`],
  [
    'Access',
    '/hub/access',
    `main:has([aria-labelledby="keys-title"] tbody tr:nth-child(${KEYS})):has([aria-labelledby="members-title"] tbody tr:nth-child(${MEMBERS + 1}))`
  ],
  [
    'Agent settings',
    '/hub/agent',
    `main:has(select#policy-shell):has(ul[aria-label="Secrets"] li:nth-child(${SECRETS})):has([aria-labelledby="slack-title"] .card)`
  ]
]

/** Runs `fn` over `0..n-1`, `width` at a time. */
async function inParallel(n: number, width: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await fn(next++)
    })
  )
}

async function post(url: string, path: string, body: unknown): Promise<void> {
  const res = await fetch(`${url}/api${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body)
  })
  if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`)
}

/** A busy org through the API: records, skills, automations, and documents ingested to ready. */
async function seedOrg(url: string): Promise<void> {
  await inParallel(RECORDS, 8, (i) =>
    post(url, '/knowledge', {
      title: `Runbook ${i + 1}: ${SENTENCES[i % SENTENCES.length]!.slice(0, 60)}`,
      body: `${SENTENCES[i % SENTENCES.length]}\n\n${SENTENCES[(i * 7 + 2) % SENTENCES.length]}`,
      tags: ['ops', `team-${i % 12}`]
    })
  )
  await inParallel(SKILLS, 8, (i) =>
    post(url, '/skills', {
      skillMd: `---\nname: skill-${i + 1}\ndescription: ${SENTENCES[i % SENTENCES.length]}\nallowed-tools: read_file shell\n---\n${SENTENCES[(i + 1) % SENTENCES.length]}\n`
    })
  )
  const zones = ['Europe/Berlin', 'America/New_York', 'Asia/Tokyo', 'UTC']
  await inParallel(AUTOMATIONS, 8, (i) =>
    post(url, '/automations', {
      name: `Automation ${i + 1}`,
      cron: `${i % 60} ${i % 24} * * ${i % 2 === 0 ? '1-5' : '*'}`,
      timezone: zones[i % zones.length],
      target: { prompt: SENTENCES[i % SENTENCES.length], engine: 'echo' },
      enabled: i % 10 !== 0
    })
  )
  for (let i = 0; i < DOCUMENTS; i++) {
    const form = new FormData()
    form.append(
      'file',
      new Blob([`# Document ${i}\n\n${SENTENCES.join('\n\n')}\n`], { type: 'text/markdown' }),
      `doc-${i}.md`
    )
    const res = await fetch(`${url}/api/knowledge/documents`, { method: 'POST', body: form })
    if (res.status !== 202) throw new Error(`POST /api/knowledge/documents: ${res.status} ${await res.text()}`)
  }
  for (;;) {
    const res = (await (await fetch(`${url}/api/knowledge/documents?state=ready&limit=200`)).json()) as {
      items: unknown[]
    }
    if (res.items.length >= DOCUMENTS) break
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/**
 * A signed-in owner's organization through the API, as busy as an org an admin runs: API keys, members, providers
 * (each a local OpenAI-compatible model) with the default model, tool policies and secrets. Its session cookie.
 */
async function seedSignedInOrg(url: string, modelUrl: string): Promise<string> {
  const { cookie } = await credentials(url) // (mints one key)
  const send = async (method: string, path: string, body: unknown, want: number) => {
    const res = await fetch(`${url}/api${path}`, {
      method,
      headers: { 'content-type': 'application/json', cookie },
      body: JSON.stringify(body)
    })
    if (res.status !== want) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
    return res
  }
  const whoami = (await (await fetch(`${url}/api/auth/whoami`, { headers: { cookie } })).json()) as {
    organizations: Array<{ id: string }>
  }
  const orgId = whoami.organizations[0]!.id
  await inParallel(KEYS - 1, 8, (i) => send('POST', '/keys', { name: `integration ${i + 2}` }, 201).then(() => {}))
  await inParallel(MEMBERS, 4, async (i) => {
    const email = `member-${i + 1}-${Date.now()}@example.test`
    const res = await fetch(`${url}/api/auth/sign-up`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password: 'benchmark password', name: `Member ${i + 1}` })
    })
    if (res.status !== 201) throw new Error(`sign-up: ${res.status} ${await res.text()}`)
    await send('POST', `/auth/organizations/${orgId}/members`, { email, role: i % 5 === 0 ? 'admin' : 'member' }, 201)
  })
  for (let i = 0; i < PROVIDERS; i++)
    await send('POST', '/providers', { name: `provider-${i + 1}`, baseUrl: modelUrl, apiKey: `sk-bench-${i}` }, 201)
  await send('PUT', '/models/default', { model: 'bench-model' }, 200)
  for (const [i, tool] of POLICIES.entries())
    await send('PUT', `/tools/policies/${tool}`, { mode: ['auto', 'approve', 'deny'][i % 3] }, 200)
  await inParallel(SECRETS, 8, (i) =>
    send('PUT', `/secrets/SECRET_${i + 1}`, { value: `value-${i + 1}` }, 201).then(() => {})
  )
  return cookie
}

/** One cold load of `path` in a fresh context: ms from the navigation's start until `ready` is in the document. */
async function coldPage(browser: Browser, url: string, path: string, ready: string, cookie?: string): Promise<number> {
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } })
  try {
    if (cookie) {
      const at = cookie.indexOf('=')
      await context.addCookies([{ name: cookie.slice(0, at), value: cookie.slice(at + 1), url }])
    }
    const page = await context.newPage()
    await page.addInitScript((selector: string) => {
      const observer = new MutationObserver(() => {
        if (window.__lastTurn === undefined && document.querySelector(selector)) {
          window.__lastTurn = performance.now()
          observer.disconnect()
        }
      })
      observer.observe(document, { childList: true, subtree: true, characterData: true })
    }, ready)
    await page.goto(`${url}${path}`)
    await page
      .locator(ready)
      .first()
      .waitFor()
      .catch(async (err: unknown) => {
        // what the page shows instead, to tell a slow page from a wrong selector
        process.stderr.write(`${path} never matched ${ready}; it shows:\n${await page.locator('body').innerText()}\n`)
        throw err
      })
    return await page.evaluate(() => window.__lastTurn ?? performance.now())
  } finally {
    await context.close()
  }
}

async function measureAdmin(label: string, env: Record<string, string>): Promise<string[]> {
  const model = await startBenchModel(() => [{ delta: { content: 'ok' }, finish: 'stop' }])
  const server = await startServer(
    'bench/cairn-server.ts',
    { KNOWLEDGE_POLL_MS: '50', PROVIDER_ALLOW_PRIVATE: 'true', ...env },
    Number(process.env.BENCH_READY_TIMEOUT_MS ?? 60_000)
  )
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking']
  })
  try {
    const seeded = Date.now()
    await seedOrg(server.url)
    process.stderr.write(
      `${label}: seeded ${RECORDS} records, ${SKILLS} skills, ${AUTOMATIONS} automations, ${DOCUMENTS} documents in ${Date.now() - seeded} ms\n`
    )
    const signedIn = Date.now()
    const cookie = await seedSignedInOrg(server.url, model.url)
    process.stderr.write(
      `${label}: seeded ${KEYS} keys, ${MEMBERS} members, ${PROVIDERS} providers, ${SECRETS} secrets in ${Date.now() - signedIn} ms\n`
    )
    const pages = [
      ...ADMIN_PAGES.map(([name, path, ready]) => ({ name, path, ready, cookie: undefined })),
      ...SIGNED_IN_PAGES.map(([name, path, ready]) => ({ name, path, ready, cookie }))
    ]
    for (const p of pages) await coldPage(browser, server.url, p.path, p.ready, p.cookie) // warm-up
    // interleaved: each round loads every page once, so a slow moment of the machine falls on all of them
    const times = pages.map(() => [] as number[])
    for (let i = 0; i < SAMPLES; i++)
      for (const [k, p] of pages.entries())
        times[k]!.push(await coldPage(browser, server.url, p.path, p.ready, p.cookie))
    // each page against the baseline of its kind (the dev org's, or the signed-in owner's)
    const baseOf = (k: number) => percentile(times[k < ADMIN_PAGES.length ? 0 : ADMIN_PAGES.length]!, 0.5)
    return pages.map(
      ({ name }, k) =>
        `| ${label} | ${name} | ${ms(percentile(times[k]!, 0.5))} | ${ms(percentile(times[k]!, 0.95))} | ${ms(Math.max(...times[k]!))} | ${(percentile(times[k]!, 0.5) / baseOf(k)).toFixed(2)} |`
    )
  } finally {
    await browser.close()
    await server.stop()
    await model.close()
  }
}

/** The admin's pages (models, access, agent settings, knowledge, skills, automations), cold, in a busy org. */
export async function benchAdminPages(): Promise<string> {
  ensureHubBuild({ log: () => {} })
  const rows = await measureAdmin('PGlite', {})
  if (benchPostgres)
    rows.push(...(await withDatabase(benchPostgres, (url) => measureAdmin('Postgres', { DATABASE_URL: url }))))
  return [
    `### The admin's pages over a busy organization, cold (${RECORDS} knowledge records, ${DOCUMENTS} documents, ${SKILLS} skills, ${AUTOMATIONS} automations; signed in: ${KEYS} API keys, ${MEMBERS + 1} members, ${PROVIDERS} providers, ${POLICIES.length} tool policies set, ${SECRETS} secrets; ${SAMPLES} loads each, a fresh browser context each: ms from navigation start to the list's first page drawn, or the whole page where it is not paged)`,
    '',
    '| database | page | median | p95 | worst | median vs baseline |',
    '| --- | --- | ---: | ---: | ---: | ---: |',
    ...rows
  ].join('\n')
}

export async function benchConsole(): Promise<string> {
  ensureHubBuild({ log: () => {} })
  const results = [await measure('PGlite', {})]
  if (benchPostgres)
    results.push(await withDatabase(benchPostgres, (url) => measure('Postgres', { DATABASE_URL: url })))
  const js = results[0]!.js
  const admin = await benchAdminPages()
  return [
    admin,
    '',
    `### The thread page over ${TURNS} ${TOOLS ? 'tool-using ' : ''}turns, cold (${SAMPLES} loads each, a fresh browser context each: ms from navigation start to the last turn rendered${TOOLS ? ', its tool result included' : ''})`,
    '',
    `| database | median | p95 | worst | thread answered (median) | API requests | event streams opened | median ratio to ${SMALL} turns |`,
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...results.map((r) => r.row),
    '',
    '### The JavaScript the page loads',
    '',
    '| scripts | KB | KB gzipped |',
    '| ---: | ---: | ---: |',
    `| ${js.scripts} | ${kb(js.scriptBytes)} | ${kb(js.scriptGzip)} |`
  ].join('\n')
}
