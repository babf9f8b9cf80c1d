// The Memory Hub console, in a real Chromium against a listening server: remember → browse and search
// with the run link, edit → history, delete → gone, stored HTML stays text, the keyboard
// path through search and edit, and the server's CSP and routes for /hub.
import t, { type Test } from 'tap'
import { waitFor } from '../helper.js'
import { HUB_CSP } from '../../plugins/hub.js'
import {
  hubServer,
  launchBrowser,
  noBrowser,
  openPage,
  recordWrites,
  SCREENSHOTS,
  RELEASE,
  screenshot,
  tabTo
} from './helpers.js'

// page-side callbacks run in the browser; this program has Node's types, not the DOM's
declare const window: { __pwned?: number }
declare const document: { activeElement: unknown; documentElement: { scrollWidth: number; clientWidth: number } }
declare function getComputedStyle(element: unknown): { outlineStyle: string; outlineWidth: string }

const { app, base } = await hubServer(t, { ECHO_WORD_DELAY_MS: '0' })
/** A browser test: skipped, with the reason, where there is no Chromium. */
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
// one browser for the file; each test opens its own context (its own cookies)
const browser = noBrowser ? (null as never) : await launchBrowser(t)
if (!noBrowser) t.comment(`screenshots of each view: ${SCREENSHOTS}`)

/** An echo run of the dev org: every sentence with "remember" becomes a fact once the capture is delivered. */
async function remember(prompt: string): Promise<{ runId: string; itemId: string; content: string }> {
  const res = await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt, engine: 'echo' } })
  if (res.statusCode !== 201) throw new Error(`run: ${res.statusCode} ${res.body}`)
  const runId = res.json().run.id as string
  const item = await waitFor(`the fact of run ${runId}`, async () => {
    const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse?limit=200' })).json()
    return (browse.items as Array<{ id: string; content: string; sourceRunId: string }>).find(
      (i) => i.sourceRunId === runId
    )
  })
  return { runId, itemId: item.id, content: item.content }
}

t.test('the server side: /hub, its CSP, client routes, assets, and no OpenAPI entry', async (t) => {
  const redirect = await app.inject({ method: 'GET', url: '/hub' })
  t.equal(redirect.statusCode, 301)
  t.equal(redirect.headers.location, '/hub/')
  for (const url of ['/hub/', '/hub/search?q=x', '/hub/items/abc', '/hub/runs/abc']) {
    const page = await app.inject({ method: 'GET', url })
    t.equal(page.statusCode, 200, `${url} is the page`)
    t.match(page.headers['content-type'], /^text\/html/)
    t.equal(page.headers['content-security-policy'], HUB_CSP)
    t.match(page.body, `<meta name="cairn-release" content="${RELEASE}">`, 'the page carries the server release')
    t.notMatch(page.body, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script')
  }
  t.match(HUB_CSP, /script-src 'self'(;|$)/)
  t.notMatch(HUB_CSP, /unsafe-inline|unsafe-eval/)
  t.match(HUB_CSP, /frame-ancestors 'none'/)
  const html = (await app.inject({ method: 'GET', url: '/hub/' })).body
  const js = /src="(\/hub\/assets\/[^"]+\.js)"/.exec(html)![1]!
  const asset = await app.inject({ method: 'GET', url: js })
  t.equal(asset.statusCode, 200)
  t.match(asset.headers['content-type'], /javascript/)
  t.match(asset.headers['cache-control'], /immutable/)
  t.equal(
    (await app.inject({ method: 'GET', url: '/hub/assets/nope.js' })).statusCode,
    404,
    'a missing asset is a 404, not the page'
  )
  const openapi = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
  t.notOk(
    Object.keys(openapi.paths).some((p) => p.startsWith('/hub')),
    'the console is not an API operation'
  )
})

test('remember → browse and search show the fact with its run link; the run page shows the text', async (t) => {
  const fact = await remember('Remember the blue door is on Elm Street. The weather is fine.')
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)

  await page.goto(`${base}/hub/`)
  const card = page.locator('.card', { hasText: 'Remember the blue door is on Elm Street.' })
  await card.waitFor()
  t.match(await page.locator('.who').textContent(), /Dev organization/)
  const runLink = card.getByRole('link', { name: new RegExp(`run ${fact.runId}`) })
  t.equal(await runLink.getAttribute('href'), `/hub/runs/${fact.runId}`)
  await screenshot(page, 'browse')

  await page.getByRole('link', { name: 'Search', exact: true }).click()
  await page.getByLabel('Search for').fill('blue door')
  await page.getByRole('button', { name: 'Search', exact: true }).click()
  const hit = page.locator('ol.cards .card', { hasText: 'Remember the blue door is on Elm Street.' })
  await hit.waitFor()
  t.equal(
    await hit.getByRole('link', { name: new RegExp(`run ${fact.runId}`) }).getAttribute('href'),
    `/hub/runs/${fact.runId}`
  )
  t.equal(new URL(page.url()).search, '?q=blue+door', 'the query is in the address (shareable, back button)')
  await screenshot(page, 'search')

  await hit.getByRole('link', { name: new RegExp(`run ${fact.runId}`) }).click()
  await page.getByText('The run has finished; the stream ended.').waitFor()
  t.equal(
    await page.locator('.output').textContent(),
    'Remember the blue door is on Elm Street. The weather is fine.',
    'the streamed text'
  )
  await page.locator('.badge', { hasText: 'succeeded' }).waitFor()
  await page.locator('.events code', { hasText: 'memory.recalled' }).waitFor()
  await page.locator('.events code', { hasText: 'run.succeeded' }).waitFor()
  await screenshot(page, 'run')
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})

test('edit → history shows created and updated (a double click saves once); delete with confirmation → gone from the API', async (t) => {
  const fact = await remember('Remember the staging database is called owl.')
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const writes = recordWrites(page)

  await page.goto(`${base}/hub/items/${fact.itemId}`)
  const content = page.getByLabel('Content')
  await t.resolveMatch(content.inputValue(), 'Remember the staging database is called owl.')
  await content.fill('Remember the staging database is called heron.')
  const patched = page.waitForResponse((r) => r.request().method() === 'PATCH')
  await page.getByRole('button', { name: 'Save changes' }).dblclick()
  t.equal((await patched).status(), 200)
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor()
  // read at once, while the history is read again: the box holds the text saved, never the one before
  t.equal(await content.inputValue(), 'Remember the staging database is called heron.', 'the text saved stays')
  const history = page.getByRole('list', { name: 'History, oldest first' })
  await history.getByText('Updated').waitFor()
  t.equal(await history.getByText('Created').count(), 1)
  t.equal(await history.getByText('Updated').count(), 1)
  t.same(writes, [`PATCH /api/memory/item/${fact.itemId}`], 'a double click sent one write')
  await screenshot(page, 'item-history')

  await page.getByRole('button', { name: 'Delete…' }).click()
  const dialog = page.getByRole('dialog', { name: 'Delete this fact?' })
  await dialog.waitFor()
  t.ok(
    await dialog.getByRole('button', { name: 'Cancel' }).evaluate((el) => el === document.activeElement),
    'Cancel has the focus: Enter does not delete'
  )
  await screenshot(page, 'delete-confirm')
  await dialog.getByRole('button', { name: 'Cancel' }).click()
  await dialog.waitFor({ state: 'hidden' })
  t.equal(writes.length, 1, 'cancel sends nothing')

  await page.getByRole('button', { name: 'Delete…' }).click()
  const deleted = page.waitForResponse((r) => r.request().method() === 'DELETE')
  await dialog.getByRole('button', { name: 'Delete', exact: true }).dblclick()
  t.equal((await deleted).status(), 200)
  await page.waitForURL(`${base}/hub/`)
  t.same(writes.slice(1), [`DELETE /api/memory/item/${fact.itemId}`], 'one delete')

  const browse = (await app.inject({ method: 'GET', url: '/api/memory/browse?limit=200' })).json()
  t.notOk(
    browse.items.some((i: { id: string }) => i.id === fact.itemId),
    'gone from browse'
  )
  const search = (await app.inject({ method: 'GET', url: '/api/memory/search?q=heron' })).json()
  t.same(search.items, [], 'gone from search')
  t.equal(
    (await app.inject({ method: 'DELETE', url: `/api/memory/item/${fact.itemId}` })).statusCode,
    404,
    'a second delete finds nothing'
  )
  t.same(problems.errors, [])
})

test('stored HTML is shown as text: nothing runs, no CSP violation', async (t) => {
  const hostile = 'Remember zebracorn <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script> ok.'
  const fact = await remember(hostile)
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)

  await page.goto(`${base}/hub/`)
  const card = page.locator('.card', { has: page.locator('.content', { hasText: '<img src=x onerror=' }) })
  await card.waitFor()
  t.equal(await card.locator('.content').textContent(), fact.content, 'the characters, as stored')
  t.equal(await page.locator('main img, main script').count(), 0, 'no element was made of them')
  await page.goto(`${base}/hub/search?q=zebracorn`)
  await page.locator('ol.cards .content', { hasText: '<script>' }).waitFor()
  await page.goto(`${base}/hub/items/${fact.itemId}`)
  await t.resolveMatch(page.getByLabel('Content').inputValue(), fact.content)
  await screenshot(page, 'xss-as-text')
  t.equal(await page.evaluate(() => window.__pwned), undefined, 'no handler ran')
  t.same(await problems.violations(), [], 'no CSP violation: the markup was never parsed')
  t.same(problems.errors, [])
})

test('keyboard only: search, open, edit and save; the focus is visible', async (t) => {
  const fact = await remember('Remember the deploy window opens at noon.')
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)

  await page.goto(`${base}/hub/`)
  await page.locator('.card').first().waitFor()
  await tabTo(page, 'nav a[href="/hub/search"]')
  const ring = await page.evaluate(() => {
    const style = getComputedStyle(document.activeElement)
    return { style: style.outlineStyle, width: style.outlineWidth }
  })
  t.not(ring.style, 'none', 'the focused link has an outline')
  t.not(ring.width, '0px')
  await page.keyboard.press('Enter')
  await page.waitForURL(`${base}/hub/search`)
  await tabTo(page, '#q')
  await page.keyboard.type('deploy window')
  await page.keyboard.press('Enter')
  await page.waitForURL(/q=deploy\+window/)
  await page.locator('ol.cards .card', { hasText: 'deploy window' }).waitFor()
  await tabTo(page, `ol.cards a[href^="/hub/items/${fact.itemId}"]`)
  await screenshot(page, 'keyboard-focus')
  await page.keyboard.press('Enter')
  await page.waitForURL(new RegExp(`/hub/items/${fact.itemId}`))
  await page.getByLabel('Content').waitFor()
  await tabTo(page, '#content')
  await page.keyboard.press('ControlOrMeta+A')
  await page.keyboard.type('Remember the deploy window opens at one.')
  await tabTo(page, 'form.edit button[type="submit"]')
  const saved = page.waitForResponse((r) => r.request().method() === 'PATCH')
  await page.keyboard.press('Enter')
  t.equal((await saved).status(), 200)
  await page.getByRole('list', { name: 'History, oldest first' }).getByText('Updated').waitFor()
  const history = (await app.inject({ method: 'GET', url: `/api/memory/item/${fact.itemId}/history` })).json().history
  t.equal(history.at(-1).content, 'Remember the deploy window opens at one.')
  t.same(problems.errors, [])
})

test('360 px wide: the browse view fits without sideways scrolling', async (t) => {
  const { page, close } = await openPage(browser, { width: 360, height: 740 })
  t.teardown(close)
  await page.goto(`${base}/hub/`)
  await page.locator('.card').first().waitFor()
  const overflow = await page.evaluate(
    () => document.documentElement.scrollWidth - document.documentElement.clientWidth
  )
  t.equal(overflow, 0, 'no horizontal overflow')
  await screenshot(page, 'browse-360px')
})
