// A conversation with a model that streams, in a real Chromium: the answer shows in the thread
// page while the run is still running, a follow-up on the organization's default model reaches
// the model with the first turn in context, and Cancel stops an answer midway. The model is a
// local OpenAI-compatible server (test/runs/openai-upstream.ts) whose answers wait on the test.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { startOpenAiUpstream, type ChatStream } from '../runs/openai-upstream.js'
import { hubServer, launchBrowser, noBrowser, openPage } from './helpers.js'

/** A promise the test resolves when it wants the model to go on. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open = () => {}
  const wait = new Promise<void>((resolve) => (open = resolve))
  return { wait, open }
}

// each answer streams itself, and may wait on a gate midway; every request is recorded
const requests: Array<{ messages: Array<{ role: string; content: unknown }>; model: string }> = []
const answers: Array<(chat: ChatStream) => Promise<void>> = []
const never = gate()
t.teardown(never.open)
const url = await startOpenAiUpstream(t, {
  models: ['live-model'],
  async chat(body, stream) {
    requests.push(body)
    const answer = answers.shift()
    const chat = stream()
    if (answer) await answer(chat)
    else chat.delta({ content: 'unscripted' })
    if (!chat.res.destroyed) chat.end()
  }
})
const dataDir = await mkdtemp(join(tmpdir(), 'cairn-hub-live-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))
const { app, base } = await hubServer(t, {
  OPENAI_BASE_URL: url,
  MODELS: 'live-model',
  DATA_DIR: dataDir,
  SANDBOX_UNCONFINED: 'true',
  RUN_POLL_MS: '50'
})
const test = (name: string, fn: (t: Test) => Promise<void>) => t.test(name, { skip: noBrowser }, fn)
const browser = noBrowser ? (null as never) : await launchBrowser(t)

test('the answer streams into the thread page; a follow-up on the default model has the first turn in context', async (t) => {
  const rest = gate()
  answers.push(
    async (chat) => {
      chat.delta({ content: 'Hello ' })
      chat.delta({ content: 'Priya, ' })
      await rest.wait
      chat.delta({ content: 'nice to meet you.' })
    },
    async (chat) => {
      chat.delta({ content: 'Your name is ' })
      chat.delta({ content: 'Priya.' })
    }
  )
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/threads`)
  // the footer says where the API reference is
  t.equal(await page.locator('footer').getByRole('link', { name: '/docs' }).getAttribute('href'), '/docs')
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('My name is Priya.')
  // nothing chosen: the organization's default model, the deployment's
  await page
    .locator('#model option', { hasText: "The organization's default (live-model)" })
    .waitFor({ state: 'attached' })
  t.equal(await page.getByRole('combobox', { name: 'Model' }).inputValue(), '')
  await page.getByRole('button', { name: 'Send' }).click()
  await page.getByRole('heading', { name: 'My name is Priya.' }).waitFor()
  const first = page.locator('.turn').first()
  // the model holds the rest of its answer: what it has said so far is on the page, the run still running
  await first.locator('.output', { hasText: 'Hello Priya,' }).waitFor()
  t.equal(await first.locator('.badge').textContent(), 'running', 'shown while the run runs')
  t.equal((await first.locator('.output').textContent())?.trim(), 'Hello Priya,')
  rest.open()
  await first.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await first.locator('.output').textContent(), 'Hello Priya, nice to meet you.')

  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('What is my name?')
  await page.getByRole('button', { name: 'Send' }).click()
  const second = page.locator('.turn').nth(1)
  await second.locator('.badge', { hasText: 'succeeded' }).waitFor()
  t.equal(await second.locator('.output').textContent(), 'Your name is Priya.', "the model's answer is shown")
  t.equal(requests.length, 2)
  t.equal(requests[1]!.model, 'live-model', 'the default model answered the follow-up')
  const conversation = requests[1]!.messages
    .filter((m) => m.role === 'user' || m.role === 'assistant')
    .map((m) => ({ role: m.role, content: m.content }))
  t.same(
    conversation,
    [
      { role: 'user', content: 'My name is Priya.' },
      { role: 'assistant', content: 'Hello Priya, nice to meet you.' },
      { role: 'user', content: 'What is my name?' }
    ],
    'the model got the first turn before the follow-up'
  )
  t.same(problems.errors, [])
  t.same(await problems.violations(), [])
})

test('Cancel stops an answer midway: the run is cancelled and the page says so', async (t) => {
  answers.push(async (chat) => {
    chat.delta({ content: 'Thinking about it' })
    await never.wait
  })
  const { page, problems, close } = await openPage(browser)
  t.teardown(close)
  await page.goto(`${base}/hub/threads`)
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill('Write a very long essay')
  await page.getByRole('button', { name: 'Send' }).click()
  const turn = page.locator('.turn').first()
  await turn.locator('.output', { hasText: 'Thinking about it' }).waitFor()
  const cancelled = page.waitForResponse((r) => /\/api\/runs\/[^/]+\/cancel$/.test(r.url()))
  await turn.getByRole('button', { name: 'Cancel' }).click()
  t.equal((await cancelled).status(), 200)
  await turn.locator('.badge', { hasText: 'cancelled' }).waitFor()
  t.equal(await turn.getByRole('button', { name: 'Cancel' }).count(), 0, 'nothing left to cancel')
  const rootRunId = new URL(page.url()).pathname.split('/').at(-1)!
  const run = (await app.inject({ method: 'GET', url: `/api/runs/${rootRunId}` })).json().run
  t.equal(run.status, 'cancelled')
  // the list of conversations: newest first
  await page.getByRole('link', { name: '← Conversations' }).click()
  const list = page.getByRole('list', { name: 'Conversations' }).getByRole('link')
  await list.first().waitFor()
  t.same(await list.allTextContents(), ['Write a very long essay', 'My name is Priya.'], 'newest first')
  t.same(problems.errors, [])
})
