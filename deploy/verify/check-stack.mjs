// Not part of the product: checks a running compose stack (compose.yaml plus
// compose.verify.yaml) from outside, through the proxy only, as a user would. Run by up.sh:
//   deploy/verify/up.sh
// Every instance healthy, a run through the proxy, a thread's runs on different instances
// each seeing the files the previous ones wrote (the instance that ran the previous run is
// paused meanwhile), an upload whose bytes land in the S3 bucket.
import { execFileSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'

const base = process.argv[2] ?? 'http://localhost:8080'
// the compose command line up.sh uses (COMPOSE), split on spaces
const [composeBin, ...composeArgs] = (
  process.env.COMPOSE ?? 'docker compose -f compose.yaml -f deploy/verify/compose.verify.yaml'
).split(' ')
const compose = (...args) =>
  execFileSync(composeBin, [...composeArgs, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim()
const docker = (...args) => execFileSync('docker', args, { encoding: 'utf8' }).trim()
const instances = ['cairn-1', 'cairn-2', 'cairn-3']
const container = (service) => compose('ps', '-q', service)
const ok = (cond, what) => {
  if (!cond) throw new Error(`FAILED: ${what}`)
  console.log(`ok - ${what}`)
}
async function until(what, fn, ms = 120_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn().catch(() => null)
    if (v) return v
    if (Date.now() > end) throw new Error(`FAILED: timed out waiting for ${what}`)
    await sleep(500)
  }
}

await until(
  'every instance healthy',
  async () => instances.every((s) => docker('inspect', '-f', '{{.State.Health.Status}}', container(s)) === 'healthy'),
  300_000
)
ok(true, 'three instances report healthy (the image HEALTHCHECK)')
await until('the proxy', async () => (await fetch(`${base}/api/health?ready=1`)).ok)
ok(true, 'the proxy answers /api/health?ready=1')

let cookie = ''
async function call(method, path, body, headers = {}) {
  const json = body !== undefined && !(body instanceof FormData)
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { cookie, ...(json ? { 'content-type': 'application/json' } : {}), ...headers },
    body: json ? JSON.stringify(body) : body
  })
  const set = res.headers.get('set-cookie')
  if (set) cookie = set.split(';')[0]
  return { status: res.status, body: await res.json().catch(() => null) }
}
const signUp = await call('POST', '/api/auth/sign-up', {
  email: `check-${Date.now()}@example.com`,
  password: 'check stack password',
  name: 'Checker'
})
ok(signUp.status === 201, `sign-up through the proxy (${signUp.status})`)
const org = await call('POST', '/api/auth/organizations', { name: 'Checked' })
ok(org.status === 201, `an organization (${org.status})`)
const orgId = org.body.organization.id
ok((await call('PUT', '/api/tools/policies/shell', { mode: 'auto' })).status === 200, 'shell tool policy: auto')

const finished = (id) =>
  until(`run ${id}`, async () => {
    const { body } = await call('GET', `/api/runs/${id}?wait=20`)
    return ['succeeded', 'failed', 'cancelled'].includes(body.run.status) ? body.run : null
  })
const echo = await call('POST', '/api/runs', { prompt: 'hello through the proxy', engine: 'echo' })
ok(echo.status === 201, `POST /api/runs (echo) through the proxy (${echo.status})`)
const echoed = await finished(echo.body.run.id)
ok(echoed.status === 'succeeded', `the echo run succeeded: ${JSON.stringify(echoed.output)}`)

// a thread of three shell runs; the instance that ran one is paused for the next
const logOf = (service, thread) => {
  try {
    return compose('exec', '-T', service, 'cat', `/data/sandboxes/${orgId}/${thread}/log.txt`)
  } catch {
    return '' // not there, or the instance is paused
  }
}
let root
let paused = null
const landed = []
for (let n = 1; n <= 3; n++) {
  const created = await call('POST', '/api/runs', {
    prompt: `shell: echo ${n} >> log.txt && cat log.txt`,
    engine: 'openai',
    ...(root ? { rootRunId: root } : {})
  })
  ok(
    created.status === 201,
    `run ${n} of the thread accepted (${created.status} ${created.status === 201 ? '' : JSON.stringify(created.body)})`
  )
  const run = await finished(created.body.run.id)
  const want = Array.from({ length: n }, (_, i) => i + 1).join('\n')
  ok(
    run.status === 'succeeded' && String(run.output).includes(want),
    `run ${n} succeeded and saw every line before it: ${JSON.stringify(run.output)}`
  )
  root ??= created.body.run.id
  const ranOn = instances.find((s) => logOf(s, root).trim().endsWith(want))
  ok(ranOn && ranOn !== paused, `run ${n} ran on ${ranOn}${paused ? ` (not ${paused}, paused)` : ''}`)
  landed.push(ranOn)
  if (paused) docker('unpause', container(paused))
  if (n < 3) {
    docker('pause', container(ranOn))
    paused = ranOn
    await sleep(13_000) // the proxy's health check takes a hung instance out (inter 1s, timeout check 5s, fall 2)
  } else paused = null
}
ok(new Set(landed).size === 3, `the thread's runs ran on ${landed.join(', ')}`)

const form = new FormData()
const bytes = `stack check ${Date.now()}\n`
form.append('file', new Blob([bytes], { type: 'text/plain' }), 'check.txt')
const up = await call('POST', '/api/uploads', form)
ok(up.status === 201, `an upload through the proxy (${up.status} ${up.status === 201 ? '' : JSON.stringify(up.body)})`)
const objects = compose('exec', '-T', 'minio', 'sh', '-c', 'find /data/cairn -type f | head -200')
const found = compose('exec', '-T', 'minio', 'sh', '-c', `grep -rl "${bytes.trim()}" /data/cairn || true`)
ok(
  found !== '',
  `its bytes are in the S3 bucket (${found.split('\n')[0]}; ${objects.split('\n').length} files in the bucket)`
)
console.log('stack check: all ok')
