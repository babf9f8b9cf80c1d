// Conversations in the console, in a real Chromium: start one, watch the answer stream, send
// a follow-up that sees the earlier turn, and decide a model's tool call (approve) with its
// tool and arguments shown, the run going on with the result. A local OpenAI-compatible
// model (test/runs/tool-model.ts) asks for the tool. Only the run's own person or an owner or
// admin of the organization is offered the decision; another member sees who decides.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { addMember, signUp, signUpWithOrg, waitFor } from '../helper.js'
import { shellCall, startToolModel } from '../runs/tool-model.js'
import { hubServer, launchBrowser, noBrowser, openPage, screenshot } from './helpers.js'

const model = await startToolModel(t)
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-hub-threads-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))
const { app, base } = await hubServer(t, {
  OPENAI_BASE_URL: model.url,
  MODELS: 'tool-model',
  ECHO_WORD_DELAY_MS: '20',
  DATA_DIR: dataDir,
  SANDBOX_UNCONFINED: 'true',
  RUN_POLL_MS: '50'
})
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

test('start a conversation, watch the answer, follow up in the same thread', async (t) => {
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/`)
  await page.getByRole('link', { name: 'Conversations' }).click()
  await page.getByText('No conversations yet').waitFor()
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('My name is Priya.')
  await page.getByRole('combobox', { name: 'Model' }).selectOption('echo')
  await page.getByRole('button', { name: 'Send' }).click()
  await page.getByRole('heading', { name: 'My name is Priya.' }).waitFor()
  const first = page.locator('.turn').first()
  await first.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await first.locator('.output').textContent(), 'My name is Priya.')

  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('history')
  await page.getByRole('combobox', { name: 'Model' }).selectOption('echo')
  await page.getByRole('button', { name: 'Send' }).click()
  const second = page.locator('.turn').nth(1)
  await second.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(
    await second.locator('.output').textContent(),
    'history: 1 turns: My name is Priya.',
    'the follow-up saw the earlier turn'
  )
  await screenshot(page, 'thread')
  const threads = (await app.inject({ method: 'GET', url: '/api/threads' })).json().items
  t.match(threads, [{ title: 'My name is Priya.', runCount: 2 }])
  await page.getByRole('link', { name: '← Conversations' }).click()
  await page.getByRole('link', { name: 'My name is Priya.' }).waitFor()
  t.same(problems.errors, [])
})

test('a tool call waits for a person: approve it in the thread, the run goes on', async (t) => {
  model.script.push(shellCall('echo hello-from-the-console'), { text: 'The command said hello.' })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/threads`)
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('Say hello from the sandbox')
  await page.getByRole('combobox', { name: 'Model' }).selectOption('tool-model')
  await page.getByRole('button', { name: 'Send' }).click()
  const waiting = page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  await waiting.waitFor()
  t.match(await waiting.textContent(), /shell[\s\S]*"command": "echo hello-from-the-console"/)
  await page.locator('.badge', { hasText: 'requires_action' }).waitFor()
  await screenshot(page, 'thread-approval')
  const decided = page.waitForResponse((r) => /\/approvals\/[^/]+$/.test(r.url()))
  await waiting.getByRole('button', { name: 'Approve shell' }).click()
  t.equal((await decided).status(), 200)
  const turn = page.locator('.turn').first()
  await turn.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await turn.locator('.output').textContent(), 'The command said hello.')
  const results = model.requests[1]!.body.messages.filter((m: { role: string }) => m.role === 'tool')
  t.match(results[0].content, /hello-from-the-console/, 'the approved call ran and its output went to the model')
  // the call and its result stay in the conversation once the run has ended, and after a reload
  const shown = turn.locator('.tool-calls li', { hasText: 'shell' })
  await shown.locator('.tool-result', { hasText: 'hello-from-the-console' }).waitFor()
  // (once ended, the turn is drawn from its transcript: the call, and that it was answered)
  await shown.filter({ hasText: '· answered' }).waitFor()
  t.match(await shown.textContent(), /"command":"echo hello-from-the-console"[\s\S]*· answered/, 'the call, answered')
  await page.reload()
  const again = page.locator('.turn').first().locator('.tool-calls li', { hasText: 'shell' })
  await again.locator('.tool-result', { hasText: 'hello-from-the-console' }).waitFor()
  await screenshot(page, 'thread-tool-result')
  t.same(problems.errors, [])
})

test('a tool call waits for a person: deny it, the model is told so and its answer is shown', async (t) => {
  const asked = model.requests.length
  model.script.push(shellCall('rm -rf ./reports', 'call_deny'), { text: 'Understood: I did not delete the reports.' })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/threads`)
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('Clean up the reports folder')
  await page.getByRole('combobox', { name: 'Model' }).selectOption('tool-model')
  await page.getByRole('button', { name: 'Send' }).click()
  const waiting = page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  await waiting.waitFor()
  t.match(
    await waiting.textContent(),
    /shell[\s\S]*"command": "rm -rf \.\/reports"/,
    'the tool and its arguments are shown'
  )
  const decided = page.waitForResponse((r) => /\/approvals\/[^/]+$/.test(r.url()))
  await waiting.getByRole('button', { name: 'Deny shell' }).click()
  const decision = await decided
  t.equal(decision.status(), 200)
  t.equal((await decision.json()).approval.status, 'denied')
  const turn = page.locator('.turn').first()
  await turn.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(
    await turn.locator('.output').textContent(),
    'Understood: I did not delete the reports.',
    'the run went on and its answer is shown'
  )
  t.equal(await waiting.count(), 0, 'nothing waits any more')
  await turn.locator('.tool-calls li', { hasText: 'shell' }).filter({ hasText: '· denied' }).waitFor()
  t.match(
    await turn.locator('.tool-result').textContent(),
    'the call was denied by a person',
    'the denied call is shown'
  )
  const results = model.requests[asked + 1]!.body.messages.filter((m: { role: string }) => m.role === 'tool')
  t.match(
    results,
    [{ tool_call_id: 'call_deny', content: 'the call was denied by a person' }],
    'the model was told the call was denied'
  )
  t.equal(model.requests.length, asked + 2, 'one model round for the call, one after the decision')
  t.same(problems.errors, [])
})

test('the waiting calls stay on screen while they are read again: deciding one leaves the other in place', async (t) => {
  model.script.push(
    {
      calls: [
        { id: 'call_first', name: 'shell', arguments: JSON.stringify({ command: 'echo first-call' }) },
        { id: 'call_second', name: 'shell', arguments: JSON.stringify({ command: 'echo second-call' }) }
      ]
    },
    { text: 'Both ran.' }
  )
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/threads`)
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('Run two commands')
  await page.getByRole('combobox', { name: 'Model' }).selectOption('tool-model')
  await page.getByRole('button', { name: 'Send' }).click()
  const waiting = page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  const calls = waiting.getByRole('listitem')
  await calls.filter({ hasText: 'second-call' }).waitFor()
  await calls.filter({ hasText: 'first-call' }).waitFor()
  // from here on, every time the box leaves the page is counted (a blink: emptied, then drawn again)
  await page.evaluate(`(() => {
    window.__approvalsGone = 0
    new MutationObserver((records) => {
      for (const r of records)
        for (const n of r.removedNodes)
          if (n.nodeType === 1 && (n.matches('.approvals') || n.querySelector('.approvals'))) window.__approvalsGone++
    }).observe(document.body, { childList: true, subtree: true })
  })()`)
  const first = calls.filter({ hasText: 'first-call' })
  const decided = page.waitForResponse((r) => /\/approvals\/[^/]+$/.test(r.url()))
  await first.getByRole('button', { name: 'Approve shell' }).click()
  t.equal((await decided).status(), 200)
  // the calls are read again (after the decision, and on its approval.resolved event): the other one stays, the box too
  await first.waitFor({ state: 'detached' })
  t.equal(await calls.count(), 1, 'one call still waits')
  t.match(await waiting.textContent(), /second-call/)
  t.equal(await page.evaluate('window.__approvalsGone'), 0, 'the box never left the page')
  await calls.getByRole('button', { name: 'Approve shell' }).click()
  await page.locator('.turn').first().locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await page.locator('.turn .output').first().textContent(), 'Both ran.')
  t.same(problems.errors, [])
})

test("another member sees a run's waiting call but no Approve or Deny; the run's own person decides", async (t) => {
  model.script.push(shellCall('echo decided-by-its-owner', 'call_own'), { text: 'Its owner approved.' })
  const owner = await signUpWithOrg(app, { name: 'Olu Owner' })
  const colleague = await signUp(app, { name: 'Mia Member' })
  await addMember(app, owner.cookie, owner.org.id, colleague.user.email, 'member')
  // a member starts the run: that member and the org's owner may decide its calls, the other member may not
  const starter = await signUp(app, { name: 'Sam Starter' })
  await addMember(app, owner.cookie, owner.org.id, starter.user.email, 'member')
  const started = await app.inject({
    method: 'POST',
    url: '/api/runs',
    headers: { cookie: starter.cookie },
    payload: { prompt: 'Greet the team from the sandbox', engine: 'openai' }
  })
  t.equal(started.statusCode, 201)
  const runId: string = started.json().run.id
  await waitFor(
    'the call waits',
    async () =>
      (await app.inject({ method: 'GET', url: `/api/runs/${runId}`, headers: { cookie: starter.cookie } })).json().run
        .status === 'requires_action'
  )
  const signedIn = async (cookie: string) => {
    const opened = await openPage(browser)
    t.teardown(opened.close)
    const [name, value] = cookie.split('=') as [string, string]
    await opened.page.context().addCookies([{ name, value, url: base }])
    await opened.page.goto(`${base}/hub/threads/${runId}`)
    return opened
  }

  const member = await signedIn(colleague.cookie)
  const watching = member.page.getByRole('region', { name: 'Tool calls waiting for a decision' })
  await watching.waitFor()
  t.match(
    await watching.textContent(),
    /shell[\s\S]*"command": "echo decided-by-its-owner"/,
    'the member sees the call and its arguments'
  )
  t.match(
    await watching.textContent(),
    /wait for the person who started this run, or an owner or admin of the organization/,
    'and who decides it'
  )
  t.equal(await member.page.getByRole('button', { name: /^(Approve|Deny) / }).count(), 0, 'no Approve or Deny')
  t.equal(await member.page.getByRole('region', { name: 'Tool calls waiting for your decision' }).count(), 0)
  await screenshot(member.page, 'thread-approval-member')

  const orgOwner = await signedIn(owner.cookie)
  const offered = orgOwner.page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  await offered.waitFor()
  // (the box is drawn again as the run's live events arrive: each button is awaited, not counted at one instant)
  for (const name of ['Approve shell', 'Deny shell']) await offered.getByRole('button', { name }).waitFor()
  t.pass("the org's owner may decide")
  t.same(orgOwner.problems.errors, [])

  const own = await signedIn(starter.cookie)
  const waiting = own.page.getByRole('region', { name: 'Tool calls waiting for your decision' })
  await waiting.waitFor()
  await waiting.getByRole('button', { name: 'Deny shell' }).waitFor()
  const decided = own.page.waitForResponse((r) => /\/approvals\/[^/]+$/.test(r.url()))
  await waiting.getByRole('button', { name: 'Approve shell' }).click()
  t.equal((await decided).status(), 200)
  const turn = own.page.locator('.turn').first()
  await turn.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await turn.locator('.output').textContent(), 'Its owner approved.')
  // the member's view follows the same run to its end, the notice gone with the call
  await member.page.locator('.turn .badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await watching.count(), 0)
  t.same(member.problems.errors, [])
  t.same(own.problems.errors, [])
})
