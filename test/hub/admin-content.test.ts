// The admin's knowledge, skills and automations pages, in a real Chromium, by keyboard alone
// in one pass: upload a document and find it by search, add, edit and delete a record; paste a
// SKILL.md (a syntax error shows the API's problems with their line; a saved one its warnings),
// run it in a new thread and then in the current one; create an automation in a time zone and
// read its next fire times, pause it, delete it. Each page is then checked by axe-core.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import type { Page } from 'playwright-core'
import { hubServer, launchBrowser, noBrowser, openPage, recordWrites, screenshot, tabTo } from './helpers.js'

declare const axe: {
  run(
    context: unknown,
    options: unknown
  ): Promise<{
    violations: Array<{ id: string; impact: string | null; help: string; nodes: Array<{ target: unknown[] }> }>
  }>
}
declare const document: {
  activeElement: { textContent: string | null } | null
  getElementById(id: string): { value: string } | null
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8')

const { app, base } = await hubServer(t, { ECHO_WORD_DELAY_MS: '0', KNOWLEDGE_POLL_MS: '50', RUN_POLL_MS: '50' })
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)
const files = await mkdtemp(join(tmpdir(), 'cairn-hub-admin-'))
t.teardown(() => rm(files, { recursive: true, force: true }))

/** No serious or critical axe-core violation on the page as it is now. */
async function axeClean(t: Test, page: Page, what: string) {
  await page.evaluate(AXE_SOURCE)
  const { violations } = await page.evaluate(() =>
    axe.run(document, { resultTypes: ['violations'], rules: { 'label-content-name-mismatch': { enabled: true } } })
  )
  const bad = violations.filter(
    (v) => v.impact === 'serious' || v.impact === 'critical' || v.id === 'label-content-name-mismatch'
  )
  t.same(
    bad.map((v) => `${v.id} (${v.impact}): ${v.help}; first ${JSON.stringify(v.nodes[0]?.target)}`),
    [],
    `axe: ${what}`
  )
}

const focusedText = (page: Page) => page.evaluate(() => document.activeElement?.textContent ?? '')

/** Moves the focus to `selector` with Tab, unless it has it already (a dialog focuses its first field). */
async function focusOn(page: Page, selector: string) {
  if (await page.locator(selector).evaluate((el) => el === (document.activeElement as unknown))) return
  await tabTo(page, selector, 10)
}

test('knowledge, skills and automations by keyboard alone, in one pass', async (t) => {
  const { page, problems, close } = await openPage(browser, { width: 1100, height: 900 })
  t.teardown(close)
  const writes = recordWrites(page)
  await page.goto(`${base}/hub/`)
  await page.locator('main h1').first().waitFor()

  // ---- Knowledge: upload a document, wait for it to be ready, find it by search
  await tabTo(page, 'nav a[href="/hub/knowledge"]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Knowledge', level: 1 }).waitFor()
  await page.getByText('No documents yet').waitFor()
  const doc = join(files, 'glacier-runbook.md')
  await writeFile(
    doc,
    '# Glacier runbook\n\n## Thawing\n\nWhen the heliotrope alarm sounds, page the storage on-call.\n'
  )
  await tabTo(page, '#document-file')
  // the file picker is the operating system's: the test hands the focused input its file
  await page.locator('#document-file').setInputFiles(doc)
  await tabTo(page, 'form[aria-labelledby="upload-title"] button[type=submit]')
  await page.keyboard.press('Enter')
  await page.getByText('Uploaded “glacier-runbook.md”').waitFor()
  const card = page.locator('li.document', { hasText: 'glacier-runbook.md' })
  await card.locator('.badge', { hasText: 'Ready' }).waitFor()
  t.match(await card.textContent(), /1 chunk/, 'its ingestion state and chunk count are shown')

  await tabTo(page, '#knowledge-q', 40, { back: true })
  await page.keyboard.type('heliotrope')
  await page.keyboard.press('Enter')
  const hit = page.locator('ol[aria-label="Knowledge search results"] li').first()
  await hit.waitFor()
  t.match(await hit.locator('h3').textContent(), /glacier-runbook\.md/, 'the document is found by its text')
  t.equal(await hit.locator('mark').first().textContent(), 'heliotrope', 'the match is marked')
  t.match(page.url(), /\/hub\/knowledge\?q=heliotrope$/, 'the query is in the address')

  // ---- a record: add (its markup stays text), find, edit in the dialog, delete after confirming
  await tabTo(page, '#record-title')
  await page.keyboard.type('Deploy <b>freeze</b> policy')
  await page.keyboard.press('Tab')
  await page.keyboard.type('No deploys on Fridays after <img src=x onerror=alert(1)> noon.')
  await page.keyboard.press('Tab')
  await page.keyboard.type('ops, deploys')
  await tabTo(page, 'form[aria-labelledby="add-record-title"] button[type=submit]')
  await page.keyboard.press('Enter')
  await page.getByText('Added “Deploy <b>freeze</b> policy”').waitFor()
  const record = page.locator('li.record').first()
  t.equal(await record.locator('h3').textContent(), 'Deploy <b>freeze</b> policy', 'a title is text, never HTML')
  t.same(await record.locator('.tags li').allTextContents(), ['ops', 'deploys'])

  await tabTo(page, '#knowledge-q', 60, { back: true })
  await page.keyboard.press('Control+A')
  await page.keyboard.type('fridays onerror')
  await page.keyboard.press('Enter')
  const recordHit = page.locator('ol[aria-label="Knowledge search results"] li', { hasText: 'Deploy <b>freeze</b>' })
  await recordHit.waitFor()
  t.match(await recordHit.locator('.snippet').textContent(), /<img src=x onerror=alert\(1\)>/, 'a snippet is text')
  t.equal(await page.locator('.snippet img').count(), 0, 'no element is made from stored text')

  await tabTo(page, 'button[aria-label="Edit record Deploy <b>freeze</b> policy"]')
  await page.keyboard.press('Enter')
  await page.locator('#edit-record-name').waitFor()
  await axeClean(t, page, 'the record editor')
  await focusOn(page, '#edit-record-name')
  await page.keyboard.press('Control+A')
  await page.keyboard.type('Deploy freeze policy')
  await tabTo(page, 'dialog[open] button[type=submit]', 10)
  await page.keyboard.press('Enter')
  await page.locator('li.record h3', { hasText: /^Deploy freeze policy$/ }).waitFor()
  const records = (await app.inject({ method: 'GET', url: '/api/knowledge' })).json().items
  t.match(records, [{ title: 'Deploy freeze policy', version: 2, tags: ['ops', 'deploys'] }], 'saved as version 2')

  await tabTo(page, 'li.record button.danger')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Delete this record?' }).waitFor()
  t.equal(await focusedText(page), 'Cancel', 'Cancel (not the delete) has the focus')
  t.notOk(
    writes.some((w) => w.startsWith('DELETE')),
    'nothing is deleted before confirming'
  )
  await page.keyboard.press('Shift+Tab')
  await page.keyboard.press('Enter')
  await page.getByText('No records yet').waitFor()
  t.same((await app.inject({ method: 'GET', url: '/api/knowledge' })).json().items, [], 'the record is gone')
  await axeClean(t, page, 'knowledge')
  await screenshot(page, 'knowledge')

  // ---- Skills: a broken SKILL.md shows the API's problems, a good one its warnings
  await tabTo(page, 'nav a[href="/hub/skills"]', 80, { back: true })
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Skills', level: 1 }).waitFor()
  await page.getByText('No skills yet').waitFor()
  // a SKILL.md read from a file lands in the box (the picker is the system's: the test hands the input its file)
  const broken = '---\nname: [unclosed\ndescription: x\n---\nDo it.\n'
  await writeFile(join(files, 'SKILL.md'), broken)
  await tabTo(page, '#skill-file')
  await page.locator('#skill-file').setInputFiles(join(files, 'SKILL.md'))
  await page.waitForFunction((text) => document.getElementById('skill-md')?.value === text, broken)
  await tabTo(page, 'form[aria-labelledby="add-skill-title"] button[type=submit]')
  await page.keyboard.press('Enter')
  const refused = page.locator('form[aria-labelledby="add-skill-title"] .refused')
  await refused.waitFor()
  t.match(await refused.textContent(), /validation_failed/, "the API's error is in the page")
  t.match(await refused.locator('.problems').textContent(), /Line \d+, column \d+/, 'with its line and column')
  t.same((await app.inject({ method: 'GET', url: '/api/skills' })).json().items, [], 'nothing was stored')

  await tabTo(page, '#skill-md', 10, { back: true })
  await page.keyboard.press('Control+A')
  await page.keyboard.type(
    '---\nname: weekly-digest\ndescription: Summarises the week.\nallowed-tools: no_such_tool\n---\nSummarise the week in three lines.'
  )
  await tabTo(page, 'form[aria-labelledby="add-skill-title"] button[type=submit]')
  await page.keyboard.press('Enter')
  await page.getByText('Saved the skill weekly-digest.').waitFor()
  const skill = (await app.inject({ method: 'GET', url: '/api/skills' })).json().items[0]
  t.ok(skill.warnings.length > 0, 'the API warns about the tool')
  t.equal(
    await page.locator('form[aria-labelledby="add-skill-title"] .warnings li').first().textContent(),
    skill.warnings[0],
    'and the page shows its warning'
  )

  // edit its SKILL.md in the dialog (the server's file, a new version); Escape closes it
  await tabTo(page, 'button[aria-label="Edit… weekly-digest"]')
  await page.keyboard.press('Enter')
  const editor = page.locator('#edit-skill-md')
  await editor.waitFor()
  t.match(
    await editor.inputValue(),
    /^---\n[\s\S]*name: weekly-digest[\s\S]*Summarise the week in three lines\./,
    'its file'
  )
  await focusOn(page, '#edit-skill-md')
  await page.keyboard.press('Control+A')
  await page.keyboard.type(
    '---\nname: weekly-digest\ndescription: Summarises the week for the team.\nallowed-tools: no_such_tool\n---\nSummarise the week in three lines.'
  )
  await tabTo(page, 'dialog[open] button[type=submit]', 10)
  await page.keyboard.press('Enter')
  await page.getByText('Saved: version 2.').waitFor()
  await axeClean(t, page, 'the skill editor')
  await page.keyboard.press('Escape')
  await page.locator('li.skill', { hasText: 'Summarises the week for the team.' }).waitFor()

  // run it in a new thread
  await tabTo(page, 'button[aria-label="Run… weekly-digest"]', 40, { back: true })
  await page.keyboard.press('Enter')
  await page.locator('#skill-input').waitFor()
  await axeClean(t, page, 'the run dialog')
  await focusOn(page, '#skill-input')
  await page.keyboard.type('first week')
  await tabTo(page, 'dialog[open] button[type=submit]', 10)
  await page.keyboard.press('Enter')
  await page.waitForURL(/\/hub\/threads\/[^/]+$/)
  const rootRunId = page.url().split('/').at(-1)!
  await page.locator('.turn .badge', { hasText: 'succeeded' }).first().waitFor()
  const first = (await app.inject({ method: 'GET', url: `/api/runs/${rootRunId}` })).json().run
  t.match(first, { origin: 'skill', metadata: { skillId: skill.id, skillVersion: 2 } }, 'a run of the edited skill')
  t.equal(first.prompt, 'first week', 'its input is the prompt')

  // and again in the current thread: the thread page leads to the skills with itself chosen
  await tabTo(page, 'a[href^="/hub/skills?thread="]', 40, { back: true })
  await page.keyboard.press('Enter')
  await page.waitForURL(new RegExp(`/hub/skills\\?thread=${rootRunId}$`))
  await tabTo(page, 'button[aria-label="Run… weekly-digest"]')
  await page.keyboard.press('Enter')
  await page.locator('#skill-thread').waitFor()
  t.equal(await page.locator('#skill-thread').inputValue(), rootRunId, 'the current thread is chosen')
  await tabTo(page, 'dialog[open] button[type=submit]', 10)
  await page.keyboard.press('Enter')
  await page.waitForURL(new RegExp(`/hub/threads/${rootRunId}$`))
  await page.locator('.turn:nth-child(2) .badge', { hasText: 'succeeded' }).waitFor()
  const thread = (await app.inject({ method: 'GET', url: `/api/threads/${rootRunId}` })).json()
  t.equal(thread.runs.length, 2, 'both skill runs are in one thread')
  await page.goto(`${base}/hub/skills`)
  await page.locator('li.skill').waitFor()
  await axeClean(t, page, 'skills')
  await screenshot(page, 'skills')

  // ---- Automations: create in a time zone, read the next fire times, pause, delete
  await tabTo(page, 'nav a[href="/hub/automations"]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Automations', level: 1 }).waitFor()
  await tabTo(page, '#automation-name')
  await page.keyboard.type('Morning digest')
  await page.keyboard.press('Tab')
  await page.keyboard.press('Control+A')
  await page.keyboard.type('0 0 30 2 *')
  await tabTo(page, '#automation-zone')
  await page.keyboard.type('Asia/Tokyo')
  t.equal(await page.locator('#automation-zone').inputValue(), 'Asia/Tokyo', 'the zone picked by typing')
  await tabTo(page, '#automation-prompt')
  await page.keyboard.type('Summarise the overnight alerts.')
  await tabTo(page, 'form[aria-labelledby="create-automation-title"] button[type=submit]')
  await page.keyboard.press('Enter')
  // a cron that never fires is refused: the API's error is in the page, and nothing is made
  const never = page.locator('form[aria-labelledby="create-automation-title"] .refused')
  await never.waitFor()
  t.match(await never.textContent(), /validation_failed/)
  t.match(await never.locator('.problems').textContent(), /never fires/)
  t.same((await app.inject({ method: 'GET', url: '/api/automations' })).json().items, [])
  await tabTo(page, '#automation-cron', 20, { back: true })
  await page.keyboard.press('Control+A')
  await page.keyboard.type('30 7 * * *')
  await tabTo(page, 'form[aria-labelledby="create-automation-title"] button[type=submit]')
  await page.keyboard.press('Enter')
  await page.getByText('Created Morning digest').waitFor()
  const auto = page.locator('li.automation', { hasText: 'Morning digest' })
  await auto.locator('.next-runs li').first().waitFor()
  const made = (await app.inject({ method: 'GET', url: '/api/automations' })).json().items[0]
  t.match(made, { cron: '30 7 * * *', timezone: 'Asia/Tokyo', enabled: true })
  t.equal(made.nextRuns.length, 5)
  t.same(
    await auto.locator('.next-runs time').evaluateAll((els) => els.map((e) => e.getAttribute('datetime'))),
    made.nextRuns,
    'the next five fire times, as the API has them'
  )
  t.match(await auto.locator('.next-runs li').first().textContent(), /07:30/, 'shown in the automation’s zone')
  for (const iso of made.nextRuns as string[]) t.equal(new Date(iso).getUTCHours(), 22, '07:30 in Tokyo is 22:30Z')

  await tabTo(page, 'button[aria-label="Pause Morning digest"]')
  await page.keyboard.press('Enter')
  await auto.locator('.badge', { hasText: 'Paused' }).waitFor()
  t.equal(await auto.locator('.next-runs').count(), 0, 'a paused automation has no next fire times')
  t.equal((await app.inject({ method: 'GET', url: `/api/automations/${made.id}` })).json().automation.enabled, false)
  await axeClean(t, page, 'automations')
  await screenshot(page, 'automations')

  await tabTo(page, 'button[aria-label="Delete… Morning digest"]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Delete this automation?' }).waitFor()
  t.equal(await focusedText(page), 'Cancel', 'Cancel has the focus')
  await axeClean(t, page, 'the delete confirmation')
  await page.keyboard.press('Shift+Tab')
  await page.keyboard.press('Enter')
  await page.getByText('No automations yet').waitFor()
  t.equal((await app.inject({ method: 'GET', url: `/api/automations/${made.id}` })).statusCode, 404, 'deleted')

  t.same(await problems.violations(), [], 'no CSP violation')
  t.same(problems.errors, [], 'no console error')
})
