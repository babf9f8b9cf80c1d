// The Memory Hub console. Time until the browse view shows its first page over a
// pool of 10,000 facts, in Debian's Chromium (playwright-core), and the size of what the
// page loads. The server is the real service in its own process (bench/memory-server.ts
// seeds the dev org's pool), on PGlite, and on Postgres when BENCH_DATABASE_URL or
// DATABASE_URL names one.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { chromium, type Browser } from 'playwright-core'
import { ensureHubBuild } from '../scripts/build-hub.mjs'
import { benchPostgres, median, startServer, withDatabase } from './lib.js'

// page-side callbacks run in the browser; this program has Node's types, not the DOM's
declare const performance: {
  now(): number
  getEntriesByType(type: 'resource'): Array<{ name: string; responseEnd: number }>
}
declare const window: { __firstPage?: number }
declare const document: { querySelector(selector: string): unknown }
declare class MutationObserver {
  constructor(callback: () => void)
  observe(target: unknown, options: { childList: boolean; subtree: boolean }): void
  disconnect(): void
}

const FACTS = Number(process.env.BENCH_FACTS ?? 10_000)
const RUNS = Number(process.env.BENCH_RUNS ?? 9)
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

const ms = (x: number) => `${Math.round(x)}`

/**
 * One load of /hub/: milliseconds from the navigation's start until the first page of facts
 * is in the document (the page's own clock, so it includes fetching the HTML, the script and
 * the stylesheet, the session and browse calls, and rendering). A fresh context has an empty
 * cache (cold); reloading the same context uses the cached, immutable assets (warm).
 */
async function firstPage(
  browser: Browser,
  url: string,
  rounds: number
): Promise<{ cold: number[]; warm: number[]; api: number[]; script: number[]; browseEnd: number[] }> {
  const cold: number[] = []
  const warm: number[] = []
  const api: number[] = []
  const script: number[] = []
  const browseEnd: number[] = []
  for (let i = 0; i < rounds; i++) {
    const context = await browser.newContext({ viewport: { width: 1100, height: 800 } })
    const page = await context.newPage()
    // the moment the first fact is in the document, taken by the page itself (polling from
    // here would add the round trips of the polls)
    await page.addInitScript(() => {
      const observer = new MutationObserver(() => {
        if (window.__firstPage === undefined && document.querySelector('ul.cards li.card')) {
          window.__firstPage = performance.now()
          observer.disconnect()
        }
      })
      observer.observe(document, { childList: true, subtree: true })
    })
    for (const list of [cold, warm]) {
      const browse = page.waitForResponse((r) => r.url().includes('/api/memory/browse'))
      await page.goto(`${url}/hub/`)
      await page.locator('ul.cards li.card').first().waitFor()
      // no named function inside: tsx would wrap it in a helper the page does not have
      const at = await page.evaluate(() => {
        const out = { now: window.__firstPage ?? performance.now(), script: 0, browse: 0 }
        for (const e of performance.getEntriesByType('resource')) {
          if (e.name.includes('/hub/assets/app-') && e.name.endsWith('.js')) out.script = e.responseEnd
          if (e.name.includes('/api/memory/browse')) out.browse = e.responseEnd
        }
        return out
      })
      list.push(at.now)
      if (list === cold) {
        script.push(at.script)
        browseEnd.push(at.browse)
      }
      api.push((await (await browse).json()).latencyMs)
      const summary = await page.locator('.summary').textContent()
      if (!summary?.includes(FACTS.toLocaleString('en-US')))
        throw new Error(`the page does not show ${FACTS} facts: ${summary}`)
    }
    await context.close()
  }
  return { cold, warm, api, script, browseEnd }
}

async function measure(label: string, env: Record<string, string>): Promise<string> {
  const server = await startServer('bench/memory-server.ts', {
    BENCH_FACTS: String(FACTS),
    MEMORY_CAPTURE_WORKER: 'false',
    ...env
  })
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
    await firstPage(browser, server.url, 1) // warm-up: the server's first queries, Chromium's first page
    const r = await firstPage(browser, server.url, RUNS)
    return `| ${label} | ${ms(median(r.cold))} | ${ms(Math.max(...r.cold))} | ${ms(median(r.warm))} | ${ms(Math.max(...r.warm))} | ${ms(median(r.script))} | ${ms(median(r.browseEnd))} | ${median(r.api).toFixed(1)} |`
  } finally {
    await browser.close()
    await server.stop()
  }
}

export async function benchHub(): Promise<string> {
  const dir = ensureHubBuild({ log: () => {} })
  const assets = join(dir, 'assets')
  const sizes = readdirSync(assets).map((file) => {
    const bytes = readFileSync(join(assets, file))
    return `| ${file.endsWith('.js') ? 'JavaScript' : 'CSS'} (${file}) | ${(bytes.length / 1024).toFixed(1)} | ${(gzipSync(bytes).length / 1024).toFixed(1)} |`
  })
  const rows = [await measure('PGlite', {})]
  if (benchPostgres) rows.push(await withDatabase(benchPostgres, (url) => measure('Postgres', { DATABASE_URL: url })))
  return [
    `### Time to the first browse page, ${FACTS.toLocaleString('en-US')} facts in the pool (${RUNS} loads each, ms from navigation start)`,
    '',
    '| database | cold median | cold worst | warm median | warm worst | cold: script loaded (median) | cold: browse answered (median) | browse API latencyMs (median) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    '### What the page loads',
    '',
    '| file | KB | KB gzipped |',
    '| --- | ---: | ---: |',
    ...sizes
  ].join('\n')
}
