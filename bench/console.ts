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
import { benchPostgres, startServer, withDatabase } from './lib.js'
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

export async function benchConsole(): Promise<string> {
  ensureHubBuild({ log: () => {} })
  const results = [await measure('PGlite', {})]
  if (benchPostgres)
    results.push(await withDatabase(benchPostgres, (url) => measure('Postgres', { DATABASE_URL: url })))
  const js = results[0]!.js
  return [
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
