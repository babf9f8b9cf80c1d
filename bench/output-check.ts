// npx tsx bench/output-check.ts: checking a run's structured output against its JSON Schema.
// A 100 KB answer (570 items, patterns on three fields) checked 300 times, one after the
// other: in the output-check thread on RE2 (what the run worker does) against the earlier
// way, Ajv with the language's backtracking RegExp on the event loop (the baseline, in the
// same run). Then what a request waits while checks run back to back: a health route (a
// local HTTP server answering `ok`) asked 300 times, idle, beside thread checks and beside
// event-loop checks. Last, the pattern `^(\d|\d\d)+$` over digits and one letter: its
// time on the baseline for growing lengths, and on RE2 for 100 KB.
import { createServer } from 'node:http'
import { once } from 'node:events'
import Ajv from 'ajv'
import { OutputChecker } from '../src/runs/output-check.js'
import { schemaRefusal } from '../src/runs/output-schema.js'
import type { RunSettings } from '../src/runs/tables.js'

const RUNS = 300
const schema = {
  type: 'object',
  required: ['items'],
  additionalProperties: false,
  properties: {
    items: {
      type: 'array',
      items: {
        type: 'object',
        required: ['id', 'title', 'tags', 'score'],
        additionalProperties: false,
        properties: {
          id: { type: 'string', pattern: '^item-[0-9]{4}$' },
          title: { type: 'string', pattern: '^[a-z ]+$', maxLength: 200 },
          tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{2,12}$' }, maxItems: 10 },
          score: { type: 'number', minimum: 0, maximum: 1 }
        }
      }
    }
  }
}
const items = Array.from({ length: 570 }, (_, i) => ({
  id: `item-${String(i).padStart(4, '0')}`,
  title: `the quick brown fox jumps over the lazy dog number ${'x'.repeat(i % 40)} and more words here`,
  tags: ['alpha', 'beta', 'gamma', 'delta', 'epsilon'],
  score: (i % 100) / 100
}))
const answer = JSON.stringify({ items })
if (schemaRefusal(schema) !== null) throw new Error('the bench schema is refused')
const settings: RunSettings = { responseFormat: { type: 'json_schema', name: 'bench', schema } }

const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
const ms = (n: number) => `${n.toFixed(2)} ms`

const native = new Ajv.default({ allErrors: false, strict: false }).compile(schema)
const inline = () => {
  const ok = native(JSON.parse(answer))
  if (!ok) throw new Error('the bench answer does not hold')
}

const checker = new OutputChecker(2000)
const threaded = async () => {
  const violation = await checker.check(settings, answer)
  if (violation !== null) throw new Error(violation)
}

async function timed(fn: () => unknown, n: number): Promise<number[]> {
  const times: number[] = []
  for (let i = 0; i < n; i++) {
    const started = performance.now()
    await fn()
    times.push(performance.now() - started)
  }
  return times
}

console.log(`answer: ${(answer.length / 1024).toFixed(0)} KB, ${items.length} items, ${RUNS} checks each\n`)
await timed(inline, 30)
await timed(threaded, 30) // the thread starts, and compiles the schema once
const base = await timed(inline, RUNS)
const thread = await timed(threaded, RUNS)
console.log('| check | p50 | p99 | p99 / baseline |')
console.log('| --- | --- | --- | --- |')
console.log(`| event loop, backtracking RegExp (baseline) | ${ms(pct(base, 50))} | ${ms(pct(base, 99))} | 1.00 |`)
console.log(
  `| output-check thread, RE2 | ${ms(pct(thread, 50))} | ${ms(pct(thread, 99))} | ${(pct(thread, 99) / pct(base, 99)).toFixed(2)} |`
)

// a health route beside the checks
const server = createServer((_req, res) => res.end('ok'))
server.listen(0, '127.0.0.1')
await once(server, 'listening')
const { port } = server.address() as { port: number }
const health = async () => {
  const res = await fetch(`http://127.0.0.1:${port}/health`)
  await res.text()
}
async function healthBeside(background: (() => Promise<void>) | null): Promise<number[]> {
  let running = background !== null
  const loop = (async () => {
    while (running) {
      await background!()
      // an event-loop check holds the loop for its whole length; yield between two
      await new Promise((resolve) => setImmediate(resolve))
    }
  })()
  const times = await timed(health, RUNS)
  running = false
  await loop
  return times
}
await timed(health, 50)
const idle = await healthBeside(null)
const besideThread = await healthBeside(threaded)
const besideInline = await healthBeside(async () => inline())
console.log('\n| health route | p50 | p99 | p99 / idle |')
console.log('| --- | --- | --- | --- |')
for (const [name, times] of [
  ['idle (baseline)', idle],
  ['beside thread checks, back to back', besideThread],
  ['beside event-loop checks, back to back', besideInline]
] as const)
  console.log(
    `| ${name} | ${ms(pct(times, 50))} | ${ms(pct(times, 99))} | ${(pct(times, 99) / pct(idle, 99)).toFixed(2)} |`
  )
server.close()

// the pattern that froze the service
const evil = '^(\\d|\\d\\d)+$'
console.log(`\n| ${evil} over digits and one letter | time |`)
console.log('| --- | --- |')
for (const n of [20, 24, 28, 32]) {
  const input = `${'1'.repeat(n)}x`
  const started = performance.now()
  new RegExp(evil, 'u').test(input)
  console.log(`| backtracking RegExp, ${n + 1} characters | ${ms(performance.now() - started)} |`)
}
const evilSettings: RunSettings = {
  responseFormat: { type: 'json_schema', name: 'evil', schema: { type: 'string', pattern: evil } }
}
const big = JSON.stringify(`${'1'.repeat(100_000)}x`)
await checker.check(evilSettings, '"1"')
const started = performance.now()
const verdict = await checker.check(evilSettings, big)
console.log(`| output-check thread, RE2, 100,001 characters | ${ms(performance.now() - started)} (${verdict}) |`)
await checker.close()
