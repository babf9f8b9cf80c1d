// The console as the dev org (this machine, no session) and as a signed-out person, in a
// real Chromium: no view logs a console error of any kind, a failed request included (the
// page once asked GET /api/auth/session, whose 401 without a session the browser reports).
import t, { type Test } from 'tap'
import { consoleViews, hubServer, launchBrowser, noBrowser, openPage } from './helpers.js'

const { app, base } = await hubServer(t, { ALLOW_DEV_ORG: 'true', ECHO_WORD_DELAY_MS: '0' })
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

test('as the dev org, every view loads without a console error or a refused request', async (t) => {
  const views = await consoleViews(app)
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  for (const [path, ready] of views) {
    await page.goto(`${base}${path}`)
    await page.locator(ready).first().waitFor()
    // the header says who the page acts as once it knows
    if (!path.startsWith('/hub/sign-')) await page.getByText('Dev organization (this machine)').waitFor()
    t.same(problems.everyError, [], path)
    problems.everyError.length = 0
  }
  t.same(await problems.violations(), [])
})

test('signed out where the dev org is off: led to sign in, and no request is refused', async (t) => {
  const closed = await hubServer(t, { ALLOW_DEV_ORG: 'false' })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const asked: string[] = []
  page.on('request', (request) => {
    const url = new URL(request.url())
    if (url.pathname.startsWith('/api/')) asked.push(`${request.method()} ${url.pathname}`)
  })
  for (const path of ['/hub/', '/hub/threads', '/hub/captures', '/hub/settings']) {
    await page.goto(`${closed.base}${path}`)
    await page.getByRole('heading', { name: 'Sign in to use the Memory Hub' }).waitFor()
  }
  t.same(problems.everyError, [])
  t.same([...new Set(asked)], ['GET /api/auth/whoami'], 'the page asks who it acts as, and nothing it would be refused')
})
