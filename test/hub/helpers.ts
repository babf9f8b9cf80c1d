// The Memory Hub console's browser tests: a real listening server over the test file's
// own database, and one headless Chromium (Debian's package, driven by playwright-core)
// per test file. The console is built first, once per source version (scripts/build-hub.mjs).
import { existsSync, mkdirSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { chromium, type Browser, type ConsoleMessage, type Page } from 'playwright-core'
import { ensureHubBuild } from '../../scripts/build-hub.mjs'
import { buildTestApp, waitFor, type EnvOverrides, type Teardown, type TestDatabase } from '../helper.js'
import { embeddedPassOnly } from '../passes.js'
import type { FastifyInstance } from 'fastify'

// page-side callbacks (addInitScript, evaluate) run in the browser; this program has Node's
// types, not the DOM's, so the few globals they touch are declared here, for this module only
declare const window: { __cspViolations?: string[] }
declare const axe: {
  run(
    context: unknown,
    options: unknown
  ): Promise<{
    violations: Array<{ id: string; impact: string | null; help: string; nodes: Array<{ target: unknown[] }> }>
  }>
}
declare const document: {
  activeElement: unknown
  addEventListener(
    type: 'securitypolicyviolation',
    listener: (e: { violatedDirective: string; blockedURI: string }) => void
  ): void
}

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
/** Why the browser tests skip, or false when they can run (they run on the embedded pass only:
 * the console's API is tested on both). */
export const noBrowser: string | false =
  embeddedPassOnly ||
  (existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (apt-get install chromium, as .ci/run does)`)

/** A release that is not a development build, so the server enforces x-service-client-release. */
export const RELEASE_COMMIT = 'hubtest1'
export const RELEASE = `run-events-v1:${RELEASE_COMMIT}`

/** Fast memory timings (as test/memory/helpers.ts). */
export const FAST: EnvOverrides = {
  MEMORY_CAPTURE_POLL_MS: '10',
  MEMORY_CAPTURE_BACKOFF_MS: '20',
  MEMORY_CAPTURE_BACKOFF_MAX_MS: '2000',
  MEMORY_CAPTURE_LEASE_MS: '5000'
}

export const SCREENSHOTS = join(import.meta.dirname, '..', '..', 'test-output', 'hub')

export type HubApp = FastifyInstance & { testDb: TestDatabase }

/** The real app, listening on 127.0.0.1 (a loopback caller: the dev org answers unsigned requests). */
export async function hubServer(t: Teardown, env: EnvOverrides = {}): Promise<{ app: HubApp; base: string }> {
  ensureHubBuild({ log: () => {} })
  const app = await buildTestApp(t, { env: { ...FAST, SERVICE_COMMIT: RELEASE_COMMIT, ...env } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  return { app, base: `http://127.0.0.1:${port}` }
}

export async function launchBrowser(t: Teardown): Promise<Browser> {
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
  t.teardown(() => browser.close())
  return browser
}

/** What a page reported that a console must never report: CSP violations, console errors, uncaught exceptions. */
export interface PageProblems {
  violations: () => Promise<string[]>
  errors: string[]
  /**
   * every console error, a failed request's included ("Failed to load resource: … 401"), and every /api answer of 400
   * or more
   */
  everyError: string[]
}

/**
 * A fresh page (its own cookies) that records CSP violations (the `securitypolicyviolation`
 * event, listened for before any of the page's scripts run) and console errors.
 */
export async function openPage(
  browser: Browser,
  opts: { width?: number; height?: number } = {}
): Promise<{ page: Page; problems: PageProblems; close: () => Promise<void> }> {
  const context = await browser.newContext({ viewport: { width: opts.width ?? 1100, height: opts.height ?? 800 } })
  const page = await context.newPage()
  await page.addInitScript(() => {
    const seen: string[] = []
    window.__cspViolations = seen
    document.addEventListener('securitypolicyviolation', (e) => seen.push(`${e.violatedDirective} ${e.blockedURI}`))
  })
  const errors: string[] = []
  const everyError: string[] = []
  page.on('console', (message: ConsoleMessage) => {
    if (message.type() !== 'error') return
    everyError.push(message.text())
    // a failed API call (a 404 the test asked for) is logged by Chromium as a resource error; that is the page working
    if (!/Failed to load resource/.test(message.text())) errors.push(message.text())
  })
  page.on('pageerror', (err) => {
    errors.push(`uncaught: ${err.message}`)
    everyError.push(`uncaught: ${err.message}`)
  })
  page.on('response', (response) => {
    if (response.status() >= 400 && new URL(response.url()).pathname.startsWith('/api/'))
      everyError.push(`${response.status()} ${response.request().method()} ${new URL(response.url()).pathname}`)
  })
  return {
    page,
    problems: {
      errors,
      everyError,
      violations: () => page.evaluate(() => window.__cspViolations ?? [])
    },
    close: () => context.close()
  }
}

/** Saves a screenshot of the page as CI output (test-output/hub/<name>.png). */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOTS, { recursive: true })
  const path = join(SCREENSHOTS, `${name}.png`)
  await page.screenshot({ path, fullPage: true })
  return path
}

/**
 * Presses Tab (Shift+Tab with `back`) until `selector`'s element has the focus (at most `max` times); keyboard only.
 */
export async function tabTo(page: Page, selector: string, max = 40, { back = false } = {}): Promise<void> {
  const target = page.locator(selector).first()
  for (let i = 0; i < max; i++) {
    await page.keyboard.press(back ? 'Shift+Tab' : 'Tab')
    if (await target.evaluate((el) => el === document.activeElement).catch(() => false)) return
  }
  throw new Error(`Tab never reached ${selector}`)
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

/**
 * axe-core's serious and critical violations of the page as it is now (an open dialog included), as the
 * accessibility walk of every view checks them (WCAG 2.1 A and AA, and axe's best practices), one line each.
 */
export async function axeProblems(page: Page): Promise<string[]> {
  await page.evaluate(AXE_SOURCE)
  const { violations } = await page.evaluate(() => axe.run(document, { resultTypes: ['violations'] }))
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map(
      (v) => `${v.id} (${v.impact}): ${v.help}; ${v.nodes.length} nodes, first ${JSON.stringify(v.nodes[0]?.target)}`
    )
}

/** The writes (anything but GET) the page sent to /api, as "METHOD /path". */
export function recordWrites(page: Page): string[] {
  const writes: string[] = []
  page.on('request', (request) => {
    const url = new URL(request.url())
    if (url.pathname.startsWith('/api/') && request.method() !== 'GET')
      writes.push(`${request.method()} ${url.pathname}`)
  })
  return writes
}

/**
 * Every view of the console with a selector that shows it has loaded, after making something for
 * each to show: an echo run that captured a fact (browse, search, the fact, the run, the ledger,
 * the outbox, the thread). The views a walk of the whole console visits: the accessibility pass
 * and the console-error walk share this list, so a new view joins both.
 */
export async function consoleViews(app: FastifyInstance): Promise<Array<[path: string, ready: string]>> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: 'Remember that the standup is at nine.', engine: 'echo' }
  })
  const runId = res.json().run.id as string
  const item = await waitFor(
    'the captured fact',
    async () =>
      (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().items[0] as { id: string } | undefined
  )
  return [
    ['/hub/', 'ul.cards li.card'],
    ['/hub/search?q=standup', 'ol.cards li'],
    [`/hub/items/${item.id}`, 'ol.history'],
    ['/hub/captures', 'ul.cards li'],
    ['/hub/captures?state=orphan', 'main h1'],
    // an unknown filter in the address shows all rather than asking the server for it
    ['/hub/captures?state=nonsense', 'ul.cards li'],
    ['/hub/recalls', 'ul.cards li'],
    [`/hub/runs/${runId}`, '.badge'],
    ['/hub/settings', '#memory-switch'],
    ['/hub/?scope=personal', 'main h1'],
    ['/hub/organization', 'main h1'],
    ['/hub/models', '#default-model'],
    ['/hub/access', '#access-title'],
    ['/hub/agent', 'select[id^="policy-"]'],
    ['/hub/knowledge', '#knowledge-title'],
    ['/hub/skills', '#skills-title'],
    ['/hub/automations', '#automations-title'],
    ['/hub/threads', 'ul.cards li'],
    [`/hub/threads/${runId}`, '.turn .badge'],
    ['/hub/sign-in', 'form'],
    ['/hub/sign-up', 'form'],
    ['/hub/no-such-page', 'main h1']
  ]
}
