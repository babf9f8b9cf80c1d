// The admin's console, in a real Chromium: sign up and create an organization (no refused
// request on the way), connect a provider pointed at a local OpenAI-compatible model, test it
// with one message, make it the default and see the next conversation go to it while a
// conversation keeps its own model; mint an API key (shown once) and revoke it (the key is then
// refused); set a tool to approve and see the next call wait; add an MCP server and see its
// tools; keyboard only; a refused action says why in the page.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import type { Page } from 'playwright-core'
import { addMember, signUp, signUpWithOrg, waitFor } from '../helper.js'
import { startLocalMcp } from '../mcp/local-mcp-server.js'
import { startToolModel } from '../runs/tool-model.js'
import {
  axeProblems,
  hubServer,
  launchBrowser,
  noBrowser,
  openPage,
  recordWrites,
  screenshot,
  tabTo
} from './helpers.js'

const model = await startToolModel(t)
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-hub-admin-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))
// the deployment configures no model of its own: the org's provider is what runs use
const { app, base } = await hubServer(t, {
  PROVIDER_ALLOW_PRIVATE: 'true',
  DATA_DIR: dataDir,
  SANDBOX_UNCONFINED: 'true',
  RUN_POLL_MS: '50'
})
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

async function cookieOf(page: Page): Promise<string> {
  return (await page.context().cookies()).map((c) => `${c.name}=${c.value}`).join('; ')
}

async function signUpAndCreateOrg(page: Page, email: string, org: string) {
  await page.goto(`${base}/hub/sign-up`)
  await page.getByLabel('Name').fill('Ada Admin')
  await page.getByLabel('Email').fill(email)
  await page.getByLabel(/Password/).fill('correct horse battery')
  await page.getByRole('button', { name: 'Create account' }).click()
  await page.getByRole('heading', { name: 'Welcome to Cairn' }).waitFor()
  await page.getByLabel('Organization name').fill(org)
  await page.getByRole('button', { name: 'Create organization' }).click()
  await page.getByRole('heading', { name: 'Browse memory' }).waitFor()
}

test('models: connect a provider, test it, make it the default; the next conversation goes to it', async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await signUpAndCreateOrg(page, 'ada@example.test', 'Acme')
  t.same(
    problems.everyError.filter((e) => /no_organization|^4\d\d /.test(e)),
    [],
    'no request the server refuses after sign-up'
  )
  // keyboard only, from the admin menu to the conversation the new default answers
  await tabTo(page, 'nav[aria-label="Admin"] a[href="/hub/models"]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Models', level: 1 }).waitFor()
  await page.getByText('No provider is connected yet.').waitFor()

  // a key a header cannot carry is refused, saying which field and why, never "Something went wrong"
  await tabTo(page, '#provider-name', 60)
  await page.keyboard.type('Local')
  await page.keyboard.press('Tab') // the kind: OpenAI-compatible, as it is
  await page.keyboard.press('Tab')
  await page.keyboard.type(model.url)
  await page.keyboard.press('Tab')
  t.equal(await page.evaluate('document.activeElement?.id'), 'provider-key')
  await page.keyboard.type('sk-café')
  await page.keyboard.press('Enter')
  const refused = page.getByRole('alert').filter({ hasText: 'apiKey' })
  await refused.waitFor()
  t.notMatch(await refused.textContent(), /Something went wrong/)
  t.match(await refused.textContent(), /validation_failed/)

  // the key field keeps the focus: a corrected key, Enter
  await page.keyboard.press('Control+A')
  await page.keyboard.type('sk-local-test')
  const connected = page.waitForResponse((r) => r.url().endsWith('/api/providers') && r.request().method() === 'POST')
  await page.keyboard.press('Enter')
  t.equal((await connected).status(), 201)
  // the page empties the form when it has read the answer, with the notice (the answer arriving is not enough)
  await page.getByRole('status').filter({ hasText: 'Connected Local.' }).waitFor()
  t.equal(await page.getByLabel('API key').inputValue(), '', 'the key leaves the page once sent')
  const card = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: /Local/ }) })
  await card.locator('.badge', { hasText: 'ready' }).waitFor()
  t.match(await card.textContent(), /tool-model/)
  const providers = await app.inject({
    method: 'GET',
    url: '/api/providers',
    headers: { cookie: await cookieOf(page) }
  })
  t.notMatch(providers.body, /sk-local-test/, 'the key is never answered')

  // one message to it
  model.script.push({ text: 'Hello from the local model' })
  await tabTo(page, 'form[aria-label="Test Local"] button[type=submit]', 60, { back: true })
  await page.keyboard.press('Enter')
  await card.getByRole('status').filter({ hasText: 'tool-model answered: Hello from the local model' }).waitFor()

  // the default
  await tabTo(page, 'button:has-text("Make tool-model the default")', 5)
  await page.keyboard.press('Enter')
  await page.locator('.current-default', { hasText: 'tool-model' }).waitFor()
  await page.getByText('chosen by an admin').waitFor()
  await screenshot(page, 'admin-models')
  t.same(await axeProblems(page), [], 'axe: a provider connected, tested, made the default')
  const cookie = await cookieOf(page)
  t.match((await app.inject({ method: 'GET', url: '/api/models/default', headers: { cookie } })).json(), {
    model: 'tool-model',
    source: 'org'
  })

  // the next message goes to it
  model.script.push({ text: 'Answered by the provider' })
  const before = model.requests.length
  await tabTo(page, 'nav a[href="/hub/threads"]', 80, { back: true })
  await page.keyboard.press('Enter')
  await tabTo(page, '#message')
  await page.keyboard.type('Who answers?')
  await tabTo(page, 'form.message-box button[type=submit]', 5)
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Who answers?' }).waitFor()
  await page.locator('.turn').first().locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await page.locator('.turn .output').first().textContent(), 'Answered by the provider')
  t.equal(model.requests.length, before + 1, 'the provider got the message')

  // (the keyboard pass ends here) a conversation on another model keeps it for its follow-ups
  await page.getByRole('link', { name: '← Conversations' }).click()
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('Stay on echo')
  await page.getByRole('combobox', { name: 'Model' }).selectOption('echo')
  await page.getByRole('button', { name: 'Send' }).click()
  await page.getByRole('heading', { name: 'Stay on echo' }).waitFor()
  await page.locator('.turn').first().locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await page.getByRole('combobox', { name: 'Model' }).inputValue(), 'echo', "the box offers the thread's model")
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('and again')
  await page.getByRole('button', { name: 'Send' }).click()
  await page.locator('.turn').nth(1).locator('.badge', { hasText: 'succeeded' }).waitFor()
  const threads = (await app.inject({ method: 'GET', url: '/api/threads', headers: { cookie } })).json().items
  const echoThread = threads.find((th: { title: string }) => th.title === 'Stay on echo')
  const detail = (
    await app.inject({
      method: 'GET',
      url: `/api/threads/${echoThread.rootRunId ?? echoThread.id}`,
      headers: { cookie }
    })
  ).json()
  t.same(
    detail.runs.map((r: { model: string }) => r.model),
    ['echo', 'echo'],
    'the follow-up stayed on the thread model, not the default'
  )
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})

test('access: mint a key (shown once, copied), revoke it; the key is then refused; members listed', async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base })
  await signUpAndCreateOrg(page, 'keys@example.test', 'Keys team')
  await page.getByRole('navigation', { name: 'Admin' }).getByRole('link', { name: 'Access' }).click()
  await page.getByRole('heading', { name: 'Access', level: 1 }).waitFor()
  const members = page.getByRole('table', { name: 'Members and their roles' })
  await members.getByRole('cell', { name: 'keys@example.test' }).waitFor()
  t.match(await members.textContent(), /Ada Admin.*keys@example\.test.*owner/)

  // keyboard only: to the name, type, Enter
  await tabTo(page, '#key-name', 60)
  await page.keyboard.type('ci pipeline')
  await page.keyboard.press('Enter')
  const shown = page.getByRole('region', { name: 'The key ci pipeline:' })
  await shown.waitFor()
  const key = (await shown.locator('code').textContent())!
  t.match(key, /\S{20,}/)
  await shown.getByRole('button', { name: 'Copy' }).click()
  await shown.getByText('Copied.').waitFor()
  t.equal(await page.evaluate('navigator.clipboard.readText()'), key)
  const used = await app.inject({ method: 'GET', url: '/api/runs', headers: { authorization: `Bearer ${key}` } })
  t.equal(used.statusCode, 200, 'the key works')
  await screenshot(page, 'admin-access')

  // revoke, keyboard only: the question comes first, Cancel has the focus
  await tabTo(page, 'button:has-text("Revoke ci pipeline")', 80)
  await page.keyboard.press('Enter')
  const dialog = page.getByRole('dialog', { name: 'Revoke the key ci pipeline?' })
  await dialog.waitFor()
  t.equal(await page.evaluate('document.activeElement?.textContent'), 'Cancel')
  await page.keyboard.press('Shift+Tab')
  const revoked = page.waitForResponse((r) => /\/api\/keys\//.test(r.url()) && r.request().method() === 'DELETE')
  await page.keyboard.press('Enter')
  t.equal((await revoked).status(), 204)
  await page.getByText('No API key is in use.').waitFor()
  const refused = await app.inject({ method: 'GET', url: '/api/runs', headers: { authorization: `Bearer ${key}` } })
  t.equal(refused.statusCode, 401, 'a revoked key is refused')
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})

test("access: a member's role changed and a member removed, asking first; the last owner is refused, saying why", async (t) => {
  const owner = await signUpWithOrg(app, { name: 'Olu Owner', org: 'Roles team' })
  const bo = await signUp(app, { name: 'Bo Member' })
  await addMember(app, owner.cookie, owner.org.id, bo.user.email, 'member')
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  const [name, value] = owner.cookie.split('=') as [string, string]
  await page.context().addCookies([{ name, value, url: base }])
  const writes = recordWrites(page)
  await page.goto(`${base}/hub/access`)
  const members = page.getByRole('table', { name: 'Members and their roles' })
  await members.getByRole('cell', { name: bo.user.email }).waitFor()
  t.same(await axeProblems(page), [], 'axe: the members with their role pickers')
  const roles = async () =>
    Object.fromEntries(
      (
        await app.inject({
          method: 'GET',
          url: `/api/auth/organizations/${owner.org.id}/members`,
          headers: { cookie: owner.cookie }
        })
      )
        .json()
        .items.map((m: { name: string; role: string }) => [m.name, m.role])
    )

  // a higher role is given at once; the members read again after it are held until the picker is read, so
  // that it is read while they are on their way: it keeps the role saved, never the old one
  let releaseMembers = () => {}
  const membersHeld = new Promise<void>((resolve) => (releaseMembers = resolve))
  const membersList = (url: URL) => url.pathname === `/api/auth/organizations/${owner.org.id}/members`
  await page.route(membersList, async (route) => {
    await membersHeld
    await route.continue()
  })
  await page.getByLabel('Role of Bo Member').selectOption('admin')
  await page.getByRole('button', { name: 'Save role of Bo Member' }).click()
  await page.getByRole('status').filter({ hasText: 'Bo Member is now an admin.' }).waitFor()
  t.equal(await page.getByLabel('Role of Bo Member').inputValue(), 'admin', 'the picker shows the role saved')
  // (the route stays: with the promise resolved, it lets every later read through at once)
  releaseMembers()
  t.same(await roles(), { 'Olu Owner': 'owner', 'Bo Member': 'admin' })

  // a lower one asks first; the only owner cannot step down, and the page says why
  await page.getByLabel('Role of Olu Owner').selectOption('member')
  await page.getByRole('button', { name: 'Save role of Olu Owner' }).click()
  const demote = page.getByRole('dialog', { name: 'Make Olu Owner a member?' })
  await demote.waitFor()
  t.match(await demote.textContent(), /this is you/)
  t.same(writes.filter((w) => w.startsWith('PATCH')).length, 1, 'nothing sent before the answer')
  await demote.getByRole('button', { name: 'Make member' }).click()
  const refused = demote.getByRole('alert')
  await refused.waitFor()
  t.match(await refused.textContent(), /the last owner cannot be demoted/)
  t.match(await refused.textContent(), /conflict/)
  await screenshot(page, 'admin-members-refused')
  t.same(await axeProblems(page), [], 'axe: the question, refused')
  await demote.getByRole('button', { name: 'Cancel' }).click()
  await demote.waitFor({ state: 'hidden' })
  t.equal(await page.getByLabel('Role of Olu Owner').inputValue(), 'owner', 'the picker shows the role kept')
  t.same(await roles(), { 'Olu Owner': 'owner', 'Bo Member': 'admin' })

  // nor be removed
  await page.getByRole('button', { name: 'Remove Olu Owner' }).click()
  const leave = page.getByRole('dialog', { name: 'Remove Olu Owner from the organization?' })
  await leave.getByRole('button', { name: 'Remove Olu Owner' }).click()
  await leave.getByRole('alert').filter({ hasText: 'the last owner cannot be removed' }).waitFor()
  await page.keyboard.press('Escape')
  await leave.waitFor({ state: 'hidden' })

  // removing a member asks first, then they are gone (and refused at their next request)
  await page.getByRole('button', { name: 'Remove Bo Member' }).click()
  const remove = page.getByRole('dialog', { name: 'Remove Bo Member from the organization?' })
  await remove.waitFor()
  const removed = page.waitForResponse((r) => r.url().includes('/members/') && r.request().method() === 'DELETE')
  await remove.getByRole('button', { name: 'Remove Bo Member' }).click()
  t.equal((await removed).status(), 204)
  await page.getByRole('status').filter({ hasText: 'Bo Member is no longer a member.' }).waitFor()
  await members.getByRole('cell', { name: bo.user.email }).waitFor({ state: 'detached' })
  t.same(await roles(), { 'Olu Owner': 'owner' })
  const bosView = await app.inject({
    method: 'GET',
    url: `/api/auth/organizations/${owner.org.id}/members`,
    headers: { cookie: bo.cookie }
  })
  t.equal(bosView.statusCode, 404, 'the removed member no longer sees the organization')
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})

test('agent settings: a tool set to approve makes the next call wait; an MCP server added with its tools', async (t) => {
  const mcp = await startLocalMcp(t, { extraTools: ['bad.name'] })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await signUpAndCreateOrg(page, 'agent@example.test', 'Agents')
  const cookie = await cookieOf(page)
  // the org's model: the local one, connected through the API this time
  const connected = await app.inject({
    method: 'POST',
    url: '/api/providers',
    headers: { cookie },
    payload: { name: 'local', baseUrl: model.url, apiKey: 'sk-local' }
  })
  t.equal(connected.statusCode, 201, connected.body)
  // keyboard only, from the admin menu
  await tabTo(page, 'nav[aria-label="Admin"] a[href="/hub/agent"]')
  await page.keyboard.press('Enter')
  await page.getByRole('heading', { name: 'Agent settings', level: 1 }).waitFor()

  // list_files runs at once by default: set it to approve (the next choice down)
  const policy = page.getByLabel('Policy of list_files')
  t.equal(await policy.inputValue(), 'auto')
  // the lists read again after each save, and the second save, are held so that the list read after the
  // first save lands while the second is on its way (as a slow answer would): it must not bring the old
  // policy back
  const gate = () => {
    let open = () => {}
    const wait = new Promise<void>((resolve) => (open = resolve))
    return { wait, open }
  }
  const listReads = [gate(), gate()]
  let reads = 0
  await page.route(
    (url) => url.pathname === '/api/tools/policies',
    async (route) => {
      await listReads[reads++]?.wait
      await route.continue()
    }
  )
  const writeFileSave = gate()
  await page.route(
    (url) => url.pathname === '/api/tools/policies/write_file',
    async (route) => {
      await writeFileSave.wait
      await route.continue()
    }
  )
  await tabTo(page, '#policy-list_files', 60)
  const saved = page.waitForResponse((r) => r.url().endsWith('/api/tools/policies/list_files'))
  await page.keyboard.press('ArrowDown')
  t.equal((await saved).status(), 200)
  await page.getByRole('status').filter({ hasText: 'Saved list_files: approve' }).waitFor()
  t.equal(
    await page.locator('#policy-list_files:focus').count(),
    1,
    'the keyboard focus stays on the choice while and after it saves'
  )
  // and write_file denied: never offered (typing the first letter of "Deny" picks it)
  await tabTo(page, '#policy-write_file', 60)
  await page.keyboard.press('d')
  const firstRead = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/tools/policies')
  listReads[0]!.open()
  await firstRead
  writeFileSave.open()
  await page.getByRole('status').filter({ hasText: 'Saved write_file: deny' }).waitFor()
  t.equal(await page.getByLabel('Policy of write_file').inputValue(), 'deny', 'the choice saved, not the old policy')
  listReads[1]!.open()

  model.script.push({ calls: [{ id: 'c1', name: 'list_files', arguments: '{}' }] }, { text: 'listed' })
  const before = model.requests.length
  const started = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie },
    payload: { prompt: 'What files are there?' }
  })
  t.equal(started.statusCode, 201, started.body)
  const runId = started.json().run.id
  const waiting = await waitFor('the run to wait for a person', async () => {
    const run = (await app.inject({ method: 'GET', url: `/api/runs/${runId}?wait=20`, headers: { cookie } })).json().run
    return run.status === 'requires_action' ? run : null
  })
  t.equal(waiting.status, 'requires_action', 'the call waits for a decision')
  const approvals = (
    await app.inject({ method: 'GET', url: `/api/runs/${runId}/approvals`, headers: { cookie } })
  ).json().items
  t.match(approvals, [{ tool: 'list_files', status: 'pending' }])
  const offered = model.requests[before]!.body.tools.map((d: { function: { name: string } }) => d.function.name)
  t.notOk(offered.includes('write_file'), 'a denied tool is not offered')

  // an MCP server, with a sealed header
  await tabTo(page, '#mcp-name', 80)
  await page.keyboard.type('local')
  await page.keyboard.press('Tab')
  await page.keyboard.type(mcp.url)
  await tabTo(page, 'button:has-text("Add a header")', 5)
  await page.keyboard.press('Enter')
  await tabTo(page, '#mcp-header-name-0', 5, { back: true })
  await page.keyboard.type('x-api-key')
  await page.keyboard.press('Tab')
  await page.keyboard.type('header-secret')
  const added = page.waitForResponse((r) => r.url().endsWith('/api/mcp-servers') && r.request().method() === 'POST')
  await page.keyboard.press('Enter')
  t.equal((await added).status(), 201)
  const server = page.getByRole('list', { name: 'MCP servers' }).getByRole('listitem').first()
  await server.locator('.badge', { hasText: 'ready' }).waitFor()
  await server.getByText('mcp__local__record').waitFor()
  t.match(await server.getByRole('list', { name: 'Warnings of local' }).textContent(), /bad\.name/)
  t.match(await server.textContent(), /headers \(sealed\): x-api-key/)
  t.notMatch(await page.content(), /header-secret/, 'the header value is not on the page')
  // its tools join the policies (MCP tools default to approve)
  t.equal(await page.getByLabel('Policy of mcp__local__record').inputValue(), 'approve')

  // secrets: the name only once saved
  await tabTo(page, '#secret-name', 80)
  await page.keyboard.type('DEPLOY_TOKEN')
  await page.keyboard.press('Tab')
  await page.keyboard.type('very-secret-value')
  await page.keyboard.press('Enter')
  await page.getByRole('list', { name: 'Secrets' }).getByText('DEPLOY_TOKEN', { exact: true }).waitFor()
  t.notMatch(await page.content(), /very-secret-value/)
  await page.getByText('not connected').waitFor()
  await screenshot(page, 'admin-agent')
  t.same(await axeProblems(page), [], 'axe: policies, an MCP server and a secret')

  // removing asks first: Cancel has the focus, Escape keeps the server, the action is one Shift+Tab away
  await tabTo(page, 'li button:has-text("Remove local")', 80, { back: true })
  await page.keyboard.press('Enter')
  const dialog = page.getByRole('dialog', { name: 'Remove the MCP server local?' })
  await dialog.waitFor()
  t.equal(await page.evaluate('document.activeElement?.textContent'), 'Cancel')
  t.same(await axeProblems(page), [], 'axe: the question before removing')
  await page.keyboard.press('Escape')
  await dialog.waitFor({ state: 'hidden' })
  t.equal(await page.evaluate('document.activeElement?.textContent'), 'Remove local', 'the focus is back on its button')
  await page.keyboard.press('Enter')
  await dialog.waitFor()
  await page.keyboard.press('Shift+Tab')
  await page.keyboard.press('Enter')
  await page.getByText('No MCP server is connected.').waitFor()
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})
