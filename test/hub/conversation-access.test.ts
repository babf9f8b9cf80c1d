// A conversation in the console for everyone, in a real Chromium: done with the keyboard
// alone, read on a 360 px wide phone, and safe with stored HTML (shown as the characters it
// is). A local OpenAI-compatible model (test/runs/tool-model.ts) answers and asks for tools.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import { shellCall, startToolModel } from '../runs/tool-model.js'
import { hubServer, launchBrowser, noBrowser, openPage, screenshot, tabTo } from './helpers.js'

// page-side callbacks run in the browser; this program has Node's types, not the DOM's
declare const window: { __mouseClicks?: number; innerWidth: number }
declare const document: {
  addEventListener(type: 'click', listener: (e: { detail: number }) => void, capture: boolean): void
  documentElement: { scrollWidth: number }
  activeElement: { textContent: string | null } | null
}
declare const axe: {
  run(
    context: unknown,
    options: unknown
  ): Promise<{ violations: Array<{ id: string; impact: string | null; help: string }> }>
}
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

const model = await startToolModel(t)
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-hub-access-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))
const { app, base } = await hubServer(t, {
  OPENAI_BASE_URL: model.url,
  MODELS: 'tool-model',
  ECHO_WORD_DELAY_MS: '5',
  DATA_DIR: dataDir,
  SANDBOX_UNCONFINED: 'true',
  RUN_POLL_MS: '50'
})
// each test starts from an empty script: answers an earlier failed test left unused would
// otherwise answer this one's run and fail it for the earlier one's reason
const test = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, { skip: noBrowser }, (t) => {
    model.script.length = 0
    return fn(t)
  })
const browser = noBrowser ? (null as never) : await launchBrowser(t)

test('a whole conversation by keyboard alone: start it, read the answer, follow up, approve a call', async (t) => {
  model.script.push({ text: 'Hello Priya.' }, shellCall('echo keyboard-approved', 'call_kb'), {
    text: 'The command said keyboard-approved.'
  })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  // a click made with a pointer has a detail of 1 or more; one made by Enter on a control has 0
  await page.addInitScript(() => {
    window.__mouseClicks = 0
    document.addEventListener(
      'click',
      (e) => {
        if (e.detail > 0) window.__mouseClicks = (window.__mouseClicks ?? 0) + 1
      },
      true
    )
  })
  await page.goto(`${base}/hub/`)
  await page.getByText('Dev organization (this machine)').waitFor()
  await tabTo(page, 'nav a[href="/hub/threads"]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Conversations', exact: true }).waitFor()

  await tabTo(page, '#message')
  await page.keyboard.type('My name is Priya.')
  // the organization's default model is the deployment's: the tool model
  await page
    .locator('#model option', { hasText: "The organization's default (tool-model)" })
    .waitFor({ state: 'attached' })
  await tabTo(page, 'form.message-box button[type=submit]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'My name is Priya.' }).waitFor()
  const first = page.locator('.turn').first()
  await first.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await first.locator('.output').textContent(), 'Hello Priya.', 'the answer is shown')

  await tabTo(page, '#message')
  await page.keyboard.type('Now run the greeting command.')
  await tabTo(page, 'form.message-box button[type=submit]')
  const sent = page.waitForResponse((r) => r.url().endsWith('/api/runs') && r.request().method() === 'POST')
  await page.keyboard.press('Enter')
  t.equal((await sent).status(), 201)
  const waiting = page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  await waiting.waitFor()
  t.match(await waiting.textContent(), /shell[\s\S]*"command": "echo keyboard-approved"/)
  // the message box has the focus again after sending; the decision is above it
  t.ok(
    await page
      .locator('#message')
      .evaluate(
        (el) => el === (globalThis as unknown as { document: { activeElement: unknown } }).document.activeElement
      ),
    'the focus is back in the message box'
  )
  await tabTo(page, 'button[aria-label="Approve shell"]', 40, { back: true })
  const decided = page.waitForResponse((r) => /\/approvals\/[^/]+$/.test(r.url()))
  await page.keyboard.press('Enter')
  t.equal((await decided).status(), 200)
  const second = page.locator('.turn').nth(1)
  await second.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await second.locator('.output').textContent(), 'The command said keyboard-approved.')
  const results = model.requests.at(-1)!.body.messages.filter((m: { role: string }) => m.role === 'tool')
  t.match(results.at(-1).content, /keyboard-approved/, 'the approved call ran')
  t.equal(await page.evaluate(() => window.__mouseClicks), 0, 'no pointer click anywhere')
  t.same(problems.errors, [])
})

test('the thread page at 360 px wide: no horizontal scroll, every control on screen and usable', async (t) => {
  const long = `https://example.test/${'very-long-path-segment-'.repeat(12)}end`
  const first = (
    await app.inject({ method: 'POST', url: '/api/runs', payload: { prompt: `Read ${long} please`, engine: 'echo' } })
  ).json().run
  await app.inject({ method: 'GET', url: `/api/runs/${first.id}?wait=30` })
  model.script.push(
    shellCall(`curl --silent --fail ${long} | tee ${'output-file-name-'.repeat(6)}.txt`, 'call_narrow'),
    { text: 'Fetched.' }
  )
  const second = (
    await app.inject({
      method: 'POST',
      url: '/api/runs',
      payload: { prompt: 'Fetch it with curl', rootRunId: first.id, model: 'tool-model' }
    })
  ).json().run

  const { page, problems, close } = await openPage(browser, { width: 360, height: 740 })
  t.teardown(close)
  await page.goto(`${base}/hub/threads/${first.id}`)
  const waiting = page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  await waiting.waitFor()
  await page.locator('.turn').first().locator('.badge', { hasText: 'succeeded' }).waitFor()
  const width = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }))
  t.equal(width.inner, 360)
  t.ok(width.scroll <= 360, `no horizontal scroll (scrollWidth ${width.scroll})`)
  const controls: Array<[string, ReturnType<typeof page.getByRole>]> = [
    ['Approve', page.getByRole('button', { name: 'Approve shell' })],
    ['Deny', page.getByRole('button', { name: 'Deny shell' })],
    ['Cancel', page.getByRole('button', { name: 'Cancel' })],
    ['the message box', page.getByRole('textbox', { name: 'Message', exact: true })],
    ['the model picker', page.getByRole('combobox', { name: 'Model' })],
    ['Send', page.getByRole('button', { name: 'Send' })],
    ['the link back to the conversations', page.getByRole('link', { name: '← Conversations' })]
  ]
  for (const [name, control] of controls) {
    await control.scrollIntoViewIfNeeded()
    const box = (await control.boundingBox())!
    t.ok(
      box.x >= 0 && box.x + box.width <= 360,
      `${name} lies within the 360 px (x ${Math.round(box.x)}, width ${Math.round(box.width)})`
    )
    // a control, not an inline link of text, is a target of at least 24 px (WCAG 2.5.8)
    if (!name.startsWith('the link'))
      t.ok(
        box.width >= 24 && box.height >= 24,
        `${name} is at least 24 px square (${Math.round(box.width)}×${Math.round(box.height)})`
      )
  }
  await screenshot(page, 'thread-360')
  // usable there: decided with a tap on the narrow page
  const decided = page.waitForResponse((r) => /\/approvals\/[^/]+$/.test(r.url()))
  await page.getByRole('button', { name: 'Deny shell' }).click()
  t.equal((await decided).status(), 200)
  await page.locator('.turn').nth(1).locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await page.locator('.turn').nth(1).locator('.output').textContent(), 'Fetched.')
  t.equal((await app.inject({ method: 'GET', url: `/api/runs/${second.id}` })).json().run.status, 'succeeded')
  t.same(problems.errors, [])
})

test('stored HTML in a conversation is shown as its characters: no element, no script, no dialog', async (t) => {
  const html = '<img src=x onerror=alert(1)><b>bold</b>'
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const dialogs: string[] = []
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message())
    void dialog.dismiss()
  })
  await page.goto(`${base}/hub/threads`)
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill(html)
  await page.getByRole('combobox', { name: 'Model' }).selectOption('echo')
  await page.getByRole('button', { name: 'Send' }).click()
  // the title, the prompt and the answer (streamed, then stored) all read as the text typed
  await page.getByRole('heading', { name: html }).waitFor()
  const turn = page.locator('.turn').first()
  await turn.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await turn.locator('.prompt').textContent(), `You ${html}`)
  t.equal(await turn.locator('.output').textContent(), html, 'the echoed answer is the same characters')
  const rootRunId = new URL(page.url()).pathname.split('/').at(-1)!
  const views = [`/hub/threads/${rootRunId}`, '/hub/threads', `/hub/runs/${rootRunId}`]
  for (const path of views) {
    await page.goto(`${base}${path}`)
    await page.getByText(html).first().waitFor()
    t.equal(await page.locator('main img, main b').count(), 0, `${path}: no element made from the stored text`)
  }
  t.same(dialogs, [], 'no dialog')
  t.same(await problems.violations(), [], 'no inline script or handler tried to run')
  t.same(problems.errors, [])
})

test("the run page's timeline: model calls with their latency, tokens, a tool call's arguments, result and decision", async (t) => {
  // the model asks for a shell call (which needs a person), then answers
  model.script.push(shellCall('echo timeline-result', 'call_tl'), { text: 'It said timeline-result.' })
  const created = await app.inject({
    method: 'POST',
    url: '/api/runs',
    payload: { prompt: 'Run the timeline command', engine: 'openai', model: 'tool-model' }
  })
  const runId = created.json().run.id as string
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/runs/${runId}`)
  const timeline = page.getByRole('list', { name: 'What the run did, in order' })
  await timeline.getByText('Needs a person’s approval.').waitFor()
  const approvals = (await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals` })).json().items
  const decided = await app.inject({
    method: 'POST',
    url: `/api/runs/${runId}/approvals/${approvals[0].id}`,
    payload: { decision: 'approve' }
  })
  t.equal(decided.statusCode, 200)
  await timeline.getByText('Run succeeded').waitFor()

  const text = (await timeline.textContent()) ?? ''
  t.match(text, /Model call: tool-model/, 'the model of each call')
  t.match(text, /Tool call: shell/)
  t.match(text, /Approved by user \w{8} after \d/, 'the decision, who made it, and how long it took')
  t.match(text, /tokens: 10 in, 4 out \(whole run\)/, "the run's tokens")
  t.equal(await timeline.locator('.step-model').count(), 2, 'two model calls')
  t.match(await timeline.locator('.step-model').first().textContent(), /\d+ (ms|s) · tool calls/, 'with its latency')

  // the arguments and the result open from the keyboard
  await tabTo(page, 'summary:has-text("Arguments of shell")')
  await page.keyboard.press('Enter')
  const args = timeline.locator('details', { hasText: 'Arguments of shell' }).locator('pre')
  await args.waitFor()
  t.match(await args.textContent(), /"command": "echo timeline-result"/)
  await tabTo(page, 'summary:has-text("Result of shell")')
  await page.keyboard.press('Space')
  const result = timeline.locator('details', { hasText: 'Result of shell' }).locator('pre')
  await result.waitFor()
  t.match(await result.textContent(), /timeline-result/)
  await screenshot(page, 'run-timeline')

  await page.evaluate(AXE_SOURCE)
  const { violations } = await page.evaluate(() => axe.run(document, { resultTypes: ['violations'] }))
  t.same(
    violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.help}`),
    [],
    'axe: nothing serious on the run page with its timeline open'
  )
  t.same(problems.errors, [])
})
