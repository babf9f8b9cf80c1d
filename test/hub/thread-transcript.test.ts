// A thread of tool-using turns in the console, in a real Chromium: the thread page shows each
// turn's tool call (its arguments) and result from the runs' transcripts, which the thread's
// one read carries, and asks for no event history (no thread or run event stream for a turn
// that has ended); the run in progress alone is followed live, by its own stream. The run page
// shows the transcript's arguments and results. Keyboard only, and axe-core finds no serious
// or critical violation on either page.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { waitFor } from '../helper.js'
import { shellCall, startToolModel } from '../runs/tool-model.js'
import { hubServer, launchBrowser, noBrowser, openPage, screenshot, tabTo } from './helpers.js'

declare const axe: {
  run(
    context: unknown,
    options: unknown
  ): Promise<{
    violations: Array<{ id: string; impact: string | null; help: string; nodes: Array<{ target: unknown[] }> }>
  }>
}
declare const document: { activeElement: { textContent: string | null } | null }
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

const model = await startToolModel(t)
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-hub-transcript-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))
const { app, base } = await hubServer(t, {
  OPENAI_BASE_URL: model.url,
  MODELS: 'tool-model',
  DATA_DIR: dataDir,
  SANDBOX_UNCONFINED: 'true',
  RUN_POLL_MS: '50'
})
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

// the shell runs without asking a person: each turn calls it, then answers

async function turn(n: number, rootRunId?: string): Promise<{ id: string; status: string }> {
  model.script.push(shellCall(`echo tool-said-${n}`, `call_${n}`), {
    text: `Turn ${n}: the shell said tool-said-${n}.`
  })
  const started = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: `Run the shell for turn ${n}`, engine: 'openai', ...(rootRunId ? { rootRunId } : {}) }
  })
  if (started.statusCode !== 201) throw new Error(`start: ${started.statusCode} ${started.body}`)
  const ended = await app.inject({ method: 'GET', url: `/api/runs/${started.json().run.id}?wait=60` })
  return ended.json().run
}

/** Every /api request the page sends, as "METHOD /path". */
function recordRequests(page: Page): string[] {
  const seen: string[] = []
  page.on('request', (request) => {
    const url = new URL(request.url())
    if (url.pathname.startsWith('/api/')) seen.push(`${request.method()} ${url.pathname}`)
  })
  return seen
}

async function axeClean(t: Test, page: Page, what: string) {
  await page.evaluate(AXE_SOURCE)
  const { violations } = await page.evaluate(() => axe.run(document, { resultTypes: ['violations'] }))
  t.same(
    violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help}; first ${JSON.stringify(v.nodes[0]?.target)}`),
    [],
    `${what}: no serious or critical axe-core violation`
  )
}

// the thread: three tool-using turns, made before any page opens (the test's own setup, not under test)
let root!: { id: string; status: string }
t.before(async () => {
  const policy = await app.inject({ method: 'PUT', url: '/api/tools/policies/shell', payload: { mode: 'auto' } })
  if (policy.statusCode !== 200) throw new Error(`shell policy: ${policy.statusCode}`)
  root = await turn(1)
  for (const n of [2, 3]) {
    const run = await turn(n, root.id)
    if (run.status !== 'succeeded') throw new Error(`turn ${n}: ${run.status}`)
  }
  if (root.status !== 'succeeded') throw new Error(`turn 1: ${root.status}`)
})

test("the thread page shows each turn's tool call and result from the transcript, with no event history", async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const requests = recordRequests(page)
  await page.goto(`${base}/hub/threads/${root.id}`)
  const turns = page.locator('.turn')
  await turns.nth(2).locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await turns.count(), 3)
  for (const n of [1, 2, 3]) {
    const call = turns.nth(n - 1).locator('.tool-calls li', { hasText: 'shell' })
    t.match(await call.locator('code').textContent(), `{"command":"echo tool-said-${n}"}`, `turn ${n}: the arguments`)
    t.match(await call.locator('.tool-result').textContent(), `tool-said-${n}`, `turn ${n}: the result`)
    t.equal(
      await turns
        .nth(n - 1)
        .locator('.output')
        .textContent(),
      `Turn ${n}: the shell said tool-said-${n}.`,
      `turn ${n}: the answer`
    )
  }
  await screenshot(page, 'thread-transcript')
  t.same(
    requests.filter((r) => /\/(thread-)?events$/.test(r)),
    [],
    'no event stream is opened: the history is the thread read'
  )
  t.ok(requests.includes(`GET /api/threads/${root.id}`), 'the thread is read once')
  t.equal(requests.filter((r) => r.startsWith('GET /api/threads/')).length, 1)

  // keyboard only: a result box takes the focus (a long one scrolls), the run's page is a Tab and an Enter away
  await tabTo(page, '.turn >> nth=1 >> .tool-result')
  t.match(await page.evaluate(() => document.activeElement?.textContent ?? ''), 'tool-said-2')
  await axeClean(t, page, 'the thread page')
  t.same(await problems.violations(), [], 'no CSP violation')
  t.same(problems.errors, [])
})

test("the run page shows the transcript's arguments and results, opened by keyboard", async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const requests = recordRequests(page)
  await page.goto(`${base}/hub/threads/${root.id}`)
  await page.locator('.turn').nth(1).locator('.badge', { hasText: 'succeeded' }).waitFor()
  // Tab reaches the second turn's link to its run's page (tabTo fails if it never does)
  await tabTo(page, '.turn >> nth=1 >> a')
  await page.keyboard.press('Enter')
  const transcript = page.getByRole('list', { name: "The run's conversation with its model" })
  await transcript.waitFor()
  t.ok(
    requests.some((r) => /^GET \/api\/runs\/[^/]+\/messages$/.test(r)),
    'the run page reads the transcript'
  )
  const summary = transcript.locator('summary', { hasText: 'arguments' }).first()
  await tabTo(page, '[aria-label="The run\'s conversation with its model"] summary')
  await page.keyboard.press('Enter')
  t.match(await summary.locator('xpath=..').locator('pre').textContent(), /"command": "echo tool-said-2"/)
  const result = transcript.locator('summary', { hasText: 'Result of shell' }).first()
  await result.focus()
  await page.keyboard.press('Enter')
  t.match(await result.locator('xpath=..').locator('pre').textContent(), 'tool-said-2')
  // the timeline still tells the model calls and the tokens
  await page.locator('.timeline .step-end', { hasText: 'tokens' }).waitFor()
  await screenshot(page, 'run-transcript')
  await axeClean(t, page, 'the run page')
  t.same(await problems.violations(), [])
  t.same(problems.errors, [])
})

test('a run in progress is followed by its own live stream only', async (t) => {
  let answer!: () => void
  const held = new Promise<void>((resolve) => (answer = resolve))
  model.script.push(shellCall('echo tool-said-live', 'call_live'), { text: 'The live turn is done.', after: held })
  const started = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: 'Run the shell once more', engine: 'openai', rootRunId: root.id }
  })
  const live: string = started.json().run.id
  // the tool round is done and stored; the model's answer is held
  await waitFor('the live turn called the shell', async () =>
    (await app.inject({ method: 'GET', url: `/api/runs/${live}/messages` }))
      .json()
      .items.some((m: { role: string }) => m.role === 'tool')
  )
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const requests = recordRequests(page)
  await page.goto(`${base}/hub/threads/${root.id}`)
  const last = page.locator('.turn').nth(3)
  await last.locator('.badge', { hasText: 'running' }).waitFor()
  await last.locator('.tool-calls li', { hasText: 'tool-said-live' }).waitFor()
  answer()
  await last.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await last.locator('.output').textContent(), 'The live turn is done.')
  await last.locator('.tool-result', { hasText: 'tool-said-live' }).waitFor()
  t.same(
    requests.filter((r) => /\/(thread-)?events$/.test(r)),
    [`GET /api/runs/${live}/events`],
    'only the run in progress is followed, by its own stream'
  )
  t.same(problems.errors, [])
})
