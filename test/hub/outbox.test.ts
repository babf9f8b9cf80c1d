// The Memory Hub console, in a real Chromium against a listening server: the capture outbox (dead →
// retry → pending, orphan → discard), the recall ledger and a run's live view, the release
// banner, the personal pool with and without a person, and the admin's memory switch.
// The capture worker is off here, so a capture stays in the state the test puts it in.
import { sql } from 'drizzle-orm'
import t, { type Test } from 'tap'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newId } from '../../src/db/ids.js'
import { ensurePool } from '../../src/memory/pools.js'
import { createPostgresPool } from '../../src/memory/postgres-pool.js'
import { signUpWithOrg, waitFor } from '../helper.js'
import { startOpenAiUpstream } from '../runs/openai-upstream.js'
import { hubServer, launchBrowser, noBrowser, openPage, recordWrites, SCREENSHOTS, screenshot } from './helpers.js'

/** A promise the test resolves when it wants the model to go on. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open = () => {}
  const wait = new Promise<void>((resolve) => (open = resolve))
  return { wait, open }
}

// the run page's test: a model that says the first half of its answer, then waits for the test
// to have seen it on the page before it says the rest (a delay between words would be a race
// with how fast the page gets there)
const STREAMED =
  'alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango'
const rest = gate()
t.teardown(rest.open)
const modelUrl = await startOpenAiUpstream(t, {
  models: ['stream-model'],
  async chat(_body, stream) {
    const chat = stream()
    const words = STREAMED.split(' ')
    chat.delta({ content: words.slice(0, 10).join(' ') + ' ' })
    await rest.wait
    if (chat.res.destroyed) return
    chat.delta({ content: words.slice(10).join(' ') })
    chat.end()
  }
})
const { app, base } = await hubServer(t, {
  MEMORY_CAPTURE_WORKER: 'false',
  OPENAI_BASE_URL: modelUrl,
  MODELS: 'stream-model'
})
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)
if (!noBrowser) t.comment(`screenshots of each view: ${SCREENSHOTS}`)

/** A capture row for a run of the dev org, as a finished run leaves it (state pending). */
async function capture(facts: string[]): Promise<string> {
  const id = newId()
  await app.db.transaction(async (tx) =>
    app.memory.forRuns.enqueueCapture(tx, { id, rootRunId: id, orgId: DEV_ORG.id, realUserId: null }, facts)
  )
  return id
}

const stateOf = async (runId: string) => {
  const list = (await app.inject({ method: 'GET', url: '/api/memory/captures?limit=200' })).json().captures as Array<{
    runId: string
    state: string
    orphan?: true
    attempts: number
  }>
  return list.find((c) => c.runId === runId)
}

test('the empty outbox and ledger say so', async (t) => {
  const { page, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/captures`)
  await page.getByText('The outbox is empty').waitFor()
  await screenshot(page, 'captures-empty')
  await page.getByRole('link', { name: 'Recall ledger' }).click()
  await page.getByText('No recalls yet').waitFor()
})

test('dead capture → Retry → pending again; orphan → Discard, with the explanation', async (t) => {
  const dead = await capture(['Remember the dead letter'])
  await app.db.execute(
    sql`update memory_captures set state = 'dead', attempts = max_attempts, last_error = 'the memory service answered 503' where run_id = ${dead}`
  )
  const orphan = await capture(['Remember the orphan'])
  await app.db.execute(
    sql`update memory_captures set state = 'delivering', attempts = 1, lease_expires_at = now() - interval '1 second' where run_id = ${orphan}`
  )
  await capture(['Remember the pending one'])

  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const writes = recordWrites(page)
  await page.goto(`${base}/hub/captures`)
  const deadRow = page.locator(`li[data-run="${dead}"]`)
  await deadRow.getByText('the memory service answered 503').waitFor()
  await page.getByRole('heading', { name: 'What is an orphan?' }).waitFor()
  t.match(
    await page.locator('.explain').textContent(),
    /never retries an orphan by itself: the write may already have happened/
  )
  await screenshot(page, 'captures')

  const retried = page.waitForResponse((r) => r.url().endsWith(`/captures/${dead}/retry`))
  await deadRow.getByRole('button', { name: 'Retry' }).dblclick()
  t.equal((await retried).status(), 200)
  await page.getByText(`The capture of run ${dead.slice(-8)} is pending again`).waitFor()
  await page.locator(`li[data-run="${dead}"] .badge`, { hasText: 'pending' }).waitFor()
  t.match(await stateOf(dead), { state: 'pending', attempts: 0 }, 'pending, with a fresh budget')

  await page.getByLabel('Show').selectOption('orphan')
  await page.waitForURL(`${base}/hub/captures?state=orphan`)
  const orphanRow = page.locator(`li[data-run="${orphan}"]`)
  await orphanRow.getByText('orphan (delivering)').waitFor()
  // the unfiltered list (which holds the orphan too) may still show, or the list may be
  // between the two, while the filtered one loads: wait until one row is left, then check it
  await page.waitForFunction("document.querySelectorAll('li.capture').length === 1")
  t.same(
    await page.locator('li.capture').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-run'))),
    [orphan],
    'the filter shows orphans only'
  )
  await screenshot(page, 'captures-orphans')
  const resolved = page.waitForResponse((r) => r.url().endsWith(`/captures/${orphan}/resolve`))
  await orphanRow.getByRole('button', { name: 'Discard' }).click()
  t.equal((await resolved).status(), 200)
  t.same(JSON.parse((await resolved).request().postData() ?? '{}'), { resolution: 'discard' })
  await page.getByText('No orphaned captures.').waitFor()
  t.match(await stateOf(orphan), { state: 'discarded' })
  t.same(
    writes,
    [`POST /api/memory/captures/${dead}/retry`, `POST /api/memory/captures/${orphan}/resolve`],
    'one write per action'
  )

  await page.getByLabel('Show').selectOption('dead')
  await page.getByText('No dead captures.').waitFor()
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})

test('the recall ledger links to the run, whose page follows its events as the text streams', async (t) => {
  const prompt = STREAMED
  // the page is loaded first, so that from the run's start to its live view is only client-side navigation
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/settings`)
  await page.getByRole('switch', { name: 'Memory for this organization' }).waitFor()
  const res = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt, engine: 'openai', model: 'stream-model' }
  })
  const runId = res.json().run.id as string
  await waitFor(
    'the recall frame',
    async () =>
      (await app.inject({ method: 'GET', url: `/api/memory/recalls?runId=${runId}` })).json().recalls.length > 0
  )
  // the frame's query: the prompt's significant words
  const searched = (await app.inject({ method: 'GET', url: `/api/memory/recalls?runId=${runId}` })).json().recalls[0]
    .query as string
  t.match(searched, /foxtrot/)

  await page.getByRole('link', { name: 'Recall ledger' }).click()
  const frame = page.locator('.card', { hasText: searched })
  await frame.waitFor()
  await frame.getByRole('link', { name: new RegExp(`run ${runId}`) }).click()
  await page.waitForURL(`${base}/hub/runs/${runId}`)
  const output = page.getByLabel('Run output')
  // the model holds the second half of its answer: the page shows the first while the run streams
  await output.getByText(/alpha/).waitFor()
  const early = await output.textContent()
  t.notMatch(early, /tango/, `partial text while the run streams: ${JSON.stringify(early)}`)
  await screenshot(page, 'run-streaming')
  rest.open()
  await page.getByText('The run has finished; the stream ended.').waitFor()
  t.equal(await output.textContent(), prompt, 'the whole text once it finished')
  await page.locator('.badge', { hasText: 'succeeded' }).waitFor()
  await page.getByRole('link', { name: '← Recall ledger' }).click()
  await page.locator('.card', { hasText: searched }).waitFor()
  await screenshot(page, 'recalls')
  t.same(problems.errors, [])
})

test('a release mismatch shows "a new version is available: reload" and changes nothing', async (t) => {
  const { page, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/settings`)
  await page.getByRole('switch', { name: 'Memory for this organization' }).waitFor()
  t.equal(await page.locator('.banner').count(), 0, 'no banner while the page and the server agree')
  // this page now speaks for an older release than the server's
  await page.route('**/api/**', (route) =>
    route.continue({ headers: { ...route.request().headers(), 'x-service-client-release': 'run-events-v1:older' } })
  )
  const refused = page.waitForResponse(
    (r) => r.url().endsWith('/api/memory/settings') && r.request().method() === 'PUT'
  )
  await page.getByRole('switch', { name: 'Memory for this organization' }).click()
  const answer = await refused
  t.equal(answer.status(), 409)
  t.match(await answer.json(), { error: 'frontend_release_mismatch' })
  const banner = page.getByRole('alert').filter({ hasText: /a new version is available: reload/i })
  await banner.waitFor()
  await screenshot(page, 'release-mismatch')
  t.match(
    (await app.inject({ method: 'GET', url: '/api/memory/settings' })).json(),
    { orgEnabled: true },
    'the switch did not move'
  )
  await page.unroute('**/api/**')
  await Promise.all([page.waitForEvent('load'), banner.getByRole('button', { name: 'reload' }).click()])
  await page.getByRole('switch', { name: 'Memory for this organization' }).waitFor()
  t.equal(await page.locator('.banner').count(), 0, 'reloaded: the banner is gone')
})

test('personal scope without a person says why and sends no write; signed in, it shows the personal pool', async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const writes = recordWrites(page)
  await page.goto(`${base}/hub/`)
  await page.getByText('Dev organization (this machine)').waitFor()
  await page.getByLabel('Personal').check()
  await page.waitForURL(`${base}/hub/?scope=personal`)
  await page.getByText('Your personal pool is unavailable: nobody is signed in.').waitFor()
  await screenshot(page, 'personal-unavailable')
  await page.goto(`${base}/hub/items/${newId()}?scope=personal`)
  await page.getByText('Your personal pool is unavailable').waitFor()
  t.equal(await page.locator('textarea, button.danger').count(), 0, 'no edit form, no delete button')
  await page.goto(`${base}/hub/search?q=anything&scope=personal`)
  await page.getByText('Your personal pool is unavailable').waitFor()
  t.same(writes, [], 'nothing was sent but reads')

  // a real person: their personal pool holds one fact
  const person = await signUpWithOrg(app, { name: 'Ada Lovelace' })
  const pool = await ensurePool(app.db, person.org.id, 'personal', person.user.id)
  await createPostgresPool(app.db).deliver(
    pool,
    { captureId: newId(), runId: newId(), rootRunId: newId(), facts: ['Ada prefers tea'] },
    async () => true
  )
  await page.goto(`${base}/hub/sign-in`)
  await page.getByLabel('Email').fill(person.user.email)
  await page.getByLabel('Password').fill('wrong password!')
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByText('Wrong email or password.').waitFor()
  await screenshot(page, 'sign-in')
  await page.getByLabel('Password').fill(person.password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL(`${base}/hub/`)
  await page.locator('.who', { hasText: 'Ada Lovelace' }).waitFor()
  await page.getByText('The organization pool is empty.').waitFor()
  await page.getByLabel('Personal').check()
  await page.locator('.card', { hasText: 'Ada prefers tea' }).waitFor()
  await screenshot(page, 'personal-signed-in')
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByText('Dev organization (this machine)').waitFor()
  t.same(problems.errors, [])
})

test('browse pages through the pool newest first, 50 at a time', async (t) => {
  const pool = await ensurePool(app.db, DEV_ORG.id, 'org', '')
  const facts = Array.from({ length: 55 }, (_, i) => `Paging fact number ${i + 1}`)
  // one delivery per fact, oldest first, so "newest first" has an order to show
  for (const fact of facts)
    await createPostgresPool(app.db).deliver(
      pool,
      { captureId: newId(), runId: newId(), rootRunId: newId(), facts: [fact] },
      async () => true
    )
  const total = (await app.inject({ method: 'GET', url: '/api/memory/browse' })).json().total as number
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/`)
  await page.getByText(`${total} facts in the organization pool, newest first. Showing 1–50.`).waitFor()
  t.equal(
    await page.locator('ul.cards li.card .content').first().textContent(),
    'Paging fact number 55',
    'the newest first'
  )
  t.equal(await page.locator('ul.cards li.card').count(), 50)
  await page.getByRole('button', { name: 'Older →' }).click()
  await page.getByText(`Showing 51–${total}.`).waitFor()
  t.match(new URL(page.url()).search, /cursor=/, 'the page is in the address')
  t.equal(await page.locator('ul.cards li.card').count(), total - 50)
  t.ok(await page.getByRole('button', { name: 'Older →' }).isDisabled(), 'no older page')
  await page.getByRole('button', { name: '← Newer' }).click()
  await page.getByText('Showing 1–50.').waitFor()
  t.equal(await page.locator('ul.cards li.card .content').first().textContent(), 'Paging fact number 55')
  t.same(problems.errors, [])
})

test('the admin switches memory off and on', async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/settings`)
  const toggle = page.getByRole('switch', { name: 'Memory for this organization' })
  await toggle.waitFor()
  t.equal(await toggle.getAttribute('aria-checked'), 'true')
  const off = page.waitForResponse((r) => r.request().method() === 'PUT')
  await toggle.click()
  t.equal((await off).status(), 200)
  await page.locator('#memory-switch[aria-checked="false"]').waitFor()
  t.match((await app.inject({ method: 'GET', url: '/api/memory/settings' })).json(), { orgEnabled: false })
  await screenshot(page, 'settings-off')
  await page.getByRole('link', { name: 'Browse' }).click()
  await page.getByText('Memory is off for this organization.').waitFor()
  await page.getByRole('link', { name: 'Settings', exact: true }).first().click()
  const on = page.waitForResponse((r) => r.request().method() === 'PUT')
  await page.getByRole('switch', { name: 'Memory for this organization' }).click()
  t.equal((await on).status(), 200)
  await page.locator('#memory-switch[aria-checked="true"]').waitFor()
  await screenshot(page, 'settings')
  t.match((await app.inject({ method: 'GET', url: '/api/memory/settings' })).json(), { orgEnabled: true })
  t.same(problems.errors, [])
})

test('a person adds a fact with the keyboard, and the admin turns on learning from conversations', async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const writes = recordWrites(page)
  await page.goto(`${base}/hub/`)
  const box = page.getByRole('textbox', { name: /A fact for the organization pool/ })
  await box.waitFor()
  // keyboard only: focus the box, type, Tab to the button, Enter
  await box.focus()
  await page.keyboard.type('The release train leaves every Tuesday at noon')
  await page.keyboard.press('Tab')
  t.equal(await page.evaluate('document.activeElement?.textContent'), 'Add fact', 'the button follows the box')
  const added = page.waitForResponse((r) => r.url().endsWith('/api/memory/items') && r.request().method() === 'POST')
  await page.keyboard.press('Enter')
  t.equal((await added).status(), 201)
  await page.getByRole('status').filter({ hasText: 'Added: The release train leaves every Tuesday at noon' }).waitFor()
  await page
    .locator('ul.cards li.card .content', { hasText: 'The release train leaves every Tuesday at noon' })
    .waitFor()
  t.equal(await box.inputValue(), '', 'the box is emptied')
  await screenshot(page, 'browse-add-fact')
  // the same fact again: the pool holds it, nothing is added
  await box.fill('the release train leaves every tuesday at noon')
  const again = page.waitForResponse((r) => r.url().endsWith('/api/memory/items'))
  await page.getByRole('button', { name: 'Add fact' }).click()
  t.equal((await again).status(), 409)
  await page.getByRole('alert').filter({ hasText: 'The pool already holds this fact.' }).waitFor()
  const pool = (await app.inject({ method: 'GET', url: '/api/memory/search?q=release+train' })).json().items
  t.equal(pool.filter((i: { content: string }) => /release train/i.test(i.content)).length, 1)
  t.same(writes.filter((w) => w === 'POST /api/memory/items').length, 2)

  await page.goto(`${base}/hub/settings`)
  const learn = page.getByRole('switch', { name: 'Learn facts from conversations' })
  await learn.waitFor()
  t.equal(await learn.getAttribute('aria-checked'), 'false', 'off by default')
  await learn.focus()
  const on = page.waitForResponse((r) => r.request().method() === 'PUT')
  await page.keyboard.press('Enter')
  t.equal((await on).status(), 200)
  await page.locator('#extract-switch[aria-checked="true"]').waitFor()
  t.match((await app.inject({ method: 'GET', url: '/api/memory/settings' })).json(), { enabled: true, extract: true })
  await screenshot(page, 'settings-extract')
  await app.inject({ method: 'PUT', url: '/api/memory/settings', payload: { enabled: true, extract: false } })
  t.same(problems.errors, [])
})
