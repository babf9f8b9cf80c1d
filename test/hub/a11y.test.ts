// Every view of the console, in a real Chromium, checked by axe-core: no serious or
// critical violation (WCAG 2.1 A and AA rules, and axe's best practices). axe's source is
// evaluated in the page through the DevTools protocol, which the page's CSP does not govern.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import { consoleViews, hubServer, launchBrowser, noBrowser, openPage } from './helpers.js'

declare const axe: {
  run(
    context: unknown,
    options: unknown
  ): Promise<{
    violations: Array<{ id: string; impact: string | null; help: string; nodes: Array<{ target: unknown[] }> }>
  }>
}
declare const document: unknown

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

const { app, base } = await hubServer(t, { ECHO_WORD_DELAY_MS: '0' })
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

t.test('/ leads to the console', async (t) => {
  const root = await app.inject({ method: 'GET', url: '/' })
  t.equal(root.statusCode, 302)
  t.equal(root.headers.location, '/hub/')
  // the console's footer links the API reference there
  const docs = await app.inject({ method: 'GET', url: '/docs' })
  t.ok(docs.statusCode < 400, `/docs answers (${docs.statusCode})`)
})

test('no serious or critical axe-core violation on any view', async (t) => {
  const views = await consoleViews(app)
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  for (const [path, ready] of views) {
    await page.goto(`${base}${path}`)
    await page.locator(ready).first().waitFor()
    await page.evaluate(AXE_SOURCE)
    const { violations } = await page.evaluate(() =>
      axe.run(document, { resultTypes: ['violations'], rules: { 'label-content-name-mismatch': { enabled: true } } })
    )
    const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    t.same(
      bad.map(
        (v) => `${v.id} (${v.impact}): ${v.help}; ${v.nodes.length} nodes, first ${JSON.stringify(v.nodes[0]?.target)}`
      ),
      [],
      path
    )
    // the rule the outside review found (a link's name not containing its visible text) holds everywhere
    t.notOk(
      violations.some((v) => v.id === 'label-content-name-mismatch'),
      `${path}: accessible names contain the visible text`
    )
  }
  t.same(problems.errors, [])
})
