import { createHmac } from 'node:crypto'
import t from 'tap'
import { freshTimestamp, signatureMatches, slackSignature, verifySlackRequest } from '../../src/slack/signature.js'

// docs.slack.dev, "Verifying requests from Slack": the worked example
const SECRET = '8f742231b10e8888abcd99yyyzzz85a5'
const TIMESTAMP = '1531420618'
const BODY =
  'token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c'
const SIGNATURE = 'v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503'
const AT = new Date(Number(TIMESTAMP) * 1000)

const verify = (
  o: Partial<{ signingSecret: string; timestamp: string; signature: string; rawBody: Buffer | string; now: Date }>
) =>
  verifySlackRequest({
    signingSecret: SECRET,
    timestamp: TIMESTAMP,
    signature: SIGNATURE,
    rawBody: Buffer.from(BODY),
    now: AT,
    ...o
  })

t.test("Slack's published test vector verifies", async (t) => {
  t.equal(slackSignature(SECRET, TIMESTAMP, BODY), SIGNATURE)
  t.equal(slackSignature(SECRET, TIMESTAMP, Buffer.from(BODY)), SIGNATURE, 'over the raw bytes')
  // an independent computation of the scheme, so the function is checked, not echoed
  t.equal(`v0=${createHmac('sha256', SECRET).update(`v0:${TIMESTAMP}:${BODY}`).digest('hex')}`, SIGNATURE)
  t.ok(verify({}))
})

t.test('anything changed fails', async (t) => {
  t.notOk(verify({ rawBody: Buffer.from(BODY.replace('roadrunner', 'coyote')) }), 'a tampered body')
  t.notOk(verify({ rawBody: Buffer.from(`${BODY} `) }), 'one byte more')
  t.notOk(verify({ signingSecret: `${SECRET.slice(0, -1)}6` }), 'another secret')
  t.notOk(verify({ timestamp: String(Number(TIMESTAMP) + 1) }), 'another timestamp (it is signed)')
  t.notOk(verify({ signature: SIGNATURE.toUpperCase() }), 'hex in the wrong case')
  t.notOk(verify({ signature: `v1=${SIGNATURE.slice(3)}` }), 'another version')
  t.notOk(verify({ signature: SIGNATURE.slice(0, -2) }), 'a shorter signature (no timingSafeEqual throw)')
  t.notOk(verify({ signature: `${SIGNATURE}00` }), 'a longer signature')
  t.notOk(verify({ signature: '' }), 'an empty signature')
  t.notOk(
    signatureMatches(SECRET, TIMESTAMP, BODY, 'v0=é'.padEnd(67, 'a')),
    'multibyte characters of the right length in characters'
  )
})

t.test('the timestamp must be within 300 s of now, both ways', async (t) => {
  const at = (offset: number) => new Date((Number(TIMESTAMP) + offset) * 1000)
  t.ok(verify({ now: at(300) }), '300 s after: still accepted')
  t.ok(verify({ now: at(-300) }), "300 s before (the sender's clock ahead): still accepted")
  t.notOk(verify({ now: at(301) }), 'stale: 301 s old')
  t.notOk(verify({ now: at(-301) }), 'from the future: 301 s ahead')
  t.notOk(verify({ now: at(86_400 * 365) }), 'a year old')
  t.notOk(freshTimestamp('', AT))
  t.notOk(freshTimestamp('1531420618.5', AT), 'seconds only')
  t.notOk(freshTimestamp('-1531420618', AT))
  t.notOk(freshTimestamp(' 1531420618', AT))
  t.notOk(freshTimestamp('1e9', AT))
  t.notOk(freshTimestamp('9'.repeat(40), AT), 'no huge numbers')
})
