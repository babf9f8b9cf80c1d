import { sql } from 'drizzle-orm'
import t from 'tap'
import { rowsOf } from '../../src/db/client.js'
import { newKeyText } from '../../src/secrets/crypto.js'
import { buildTestApp, signUpWithOrg, waitFor } from '../helper.js'
import { startToolModel } from '../runs/tool-model.js'
import { startFakeSlack } from './fake-slack.js'
import { connectSlack, installApp, sendEvent } from './helpers.js'

// What a Slack thread gives the model: a person's text as they wrote it (line breaks, code
// blocks, indentation), and what colleagues wrote in the thread since the bot last replied.

async function setup(t: import('tap').Test) {
  const model = await startToolModel(t)
  const fake = await startFakeSlack(t)
  const app = await buildTestApp(t, {
    env: {
      SLACK_API_URL: fake.url,
      OPENAI_BASE_URL: model.url,
      MODELS: 'tool-model',
      RUN_POLL_MS: '50',
      SLACK_OUTBOX_POLL_MS: '100',
      SLACK_RETRY_BASE_MS: '20',
      ALLOW_DEV_ORG: 'false',
      SECRETS_KEY: newKeyText()
    }
  })
  const owner = await signUpWithOrg(app)
  const slack = installApp(fake)
  t.equal((await connectSlack(app, owner.cookie, slack)).statusCode, 200)
  /** A person writes in the channel; a mention of the bot is also sent as Slack's app_mention event. */
  async function say(user: { id: string; name: string }, text: string, threadTs?: string) {
    const message = fake.say(slack.botToken, {
      channel: 'C0OPS',
      text,
      user: user.id,
      name: user.name,
      ...(threadTs ? { threadTs } : {})
    })
    if (text.includes(`<@${slack.botUserId}>`)) {
      const event = {
        type: 'app_mention',
        user: user.id,
        text,
        ts: message.ts,
        channel: 'C0OPS',
        event_ts: message.ts,
        ...(threadTs ? { thread_ts: threadTs } : {})
      }
      t.equal((await sendEvent(app, slack, event)).statusCode, 200)
    }
    return message
  }
  /** The bot's answer to the mention at `ts`, once posted. */
  const answered = (ts: string) =>
    waitFor(
      'the answer in the thread',
      async () =>
        rowsOf<{ message_ts: string; reply_ts: string | null }>(
          await app.db.execute(
            sql`select message_ts, reply_ts from slack_replies where message_ts = ${ts} and state = 'sent'`
          )
        )[0]
    )
  return { app, model, fake, slack, say, answered }
}

const ALICE = { id: 'UALICE', name: 'Alice' }
const BOB = { id: 'UBOB', name: 'Bob' }

t.test('a mention keeps its line breaks: code blocks, lists and tracebacks reach the model as written', async (t) => {
  const { app, model, slack, say, answered } = await setup(t)
  model.script.push({ text: 'Looks like a missing key.' })
  const body = [
    'why does this fail?',
    '```',
    'Traceback (most recent call last):',
    '  File "app.py", line 3, in <module>',
    '    main()',
    "KeyError: 'host'",
    '```',
    '• step one',
    '• step two &amp; &lt;three&gt;'
  ].join('\n')
  const mention = await say(ALICE, `<@${slack.botUserId}> ${body}`)
  await answered(mention.ts)
  const expected = body.replace('&amp;', '&').replace('&lt;', '<').replace('&gt;', '>')
  const [run] = rowsOf<{ prompt: string }>(
    await app.db.execute(sql`select prompt from runs where metadata->'slack'->>'ts' = ${mention.ts}`)
  )
  t.equal(run!.prompt, expected, 'the run keeps the text as written')
  t.equal(model.requests[0]!.body.messages.at(-1).content, expected, 'and so does the model request')
})

t.test(
  "a colleague's message in the thread since the bot's last reply is in the next mention's context, naming its author",
  async (t) => {
    const { model, fake, slack, say, answered } = await setup(t)
    model.script.push({ text: 'Restart web-12.' }, { text: 'Then restart web-13.' }, { text: 'It is web-13.' })
    const first = await say(ALICE, `<@${slack.botUserId}> which host is broken? The alert says web-12`)
    await answered(first.ts)
    // Bob writes in the thread without mentioning the bot: no run, but the next mention sees it
    await say(BOB, 'Correction: the broken host is web-13', first.ts)
    await say(BOB, 'Also:\n1. it runs nginx\n2. it was patched yesterday', first.ts)
    const second = await say(ALICE, `<@${slack.botUserId}> so what do I restart?`, first.ts)
    await answered(second.ts)
    t.ok(fake.calls['conversations.replies']! >= 1, 'the thread was read through conversations.replies')

    const messages = model.requests[1]!.body.messages as Array<{ role: string; content: string }>
    const tail = messages.slice(-5)
    t.match(tail, [
      { role: 'user', content: 'which host is broken? The alert says web-12' },
      { role: 'assistant', content: 'Restart web-12.' },
      { role: 'user', content: /^Bob \(<@UBOB>\) wrote in the Slack thread:\nCorrection: the broken host is web-13$/ },
      { role: 'user', content: /^Bob \(<@UBOB>\) wrote in the Slack thread:\nAlso:\n1\. it runs nginx\n2\. it was/ },
      { role: 'user', content: 'so what do I restart?' }
    ])
    t.equal(
      messages.filter((m) => m.content.includes('which host is broken')).length,
      1,
      'a mention already in the thread is not repeated as a colleague message'
    )

    // once the bot has replied after them, they are in the thread's turns no more than once
    const third = await say(ALICE, `<@${slack.botUserId}> remind me which one?`, first.ts)
    await answered(third.ts)
    const later = model.requests[2]!.body.messages as Array<{ role: string; content: string }>
    t.equal(
      later.filter((m) => m.content.includes('Correction')).length,
      0,
      "messages before the bot's reply are not sent again"
    )
    t.same(later.at(-1), { role: 'user', content: 'remind me which one?' })
  }
)
