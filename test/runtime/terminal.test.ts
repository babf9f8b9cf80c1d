import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedOnly, embeddedPassOnly } from '../passes.js'
import WebSocket from 'ws'
import { readdir, readFile } from 'node:fs/promises'
import { DEV_ORG, DEV_USER } from '../../src/auth/dev-org.js'
import { probeBubblewrap } from '../../src/runtime/bubblewrap.js'
import { newId } from '../../src/db/ids.js'
import type { EnvOverrides, Teardown } from '../helper.js'
import { fakeRuns } from './fakes.js'
import { buildRuntimeApp } from './group.js'

async function build(t: Teardown, env: EnvOverrides) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-terminal-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const runs = fakeRuns()
  const app = await buildRuntimeApp(t, { env: { DATA_DIR: dataDir, ...env }, runtime: { runs } })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  return { app, runs, base: `ws://127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}` }
}

/** One listening app for the tests that need no special settings; each test has its own run and thread. */
const SHARED_ENV: EnvOverrides = {
  CORS_ORIGINS: 'https://app.example.com',
  WS_MAX_MESSAGE_BYTES: '1024',
  SANDBOX_UNCONFINED: 'true'
}
let shared: ReturnType<typeof build> | undefined

async function setup(own?: { t: Teardown; env: EnvOverrides }) {
  const base = own ? await build(own.t, own.env) : await (shared ??= build(t, SHARED_ENV))
  const runId = newId()
  const threadId = newId()
  base.runs.add(DEV_ORG.id, runId, threadId)
  return { ...base, runId, threadId }
}

/** Whether a process whose command line holds `marker` is alive on this host. */
async function processes(marker: string): Promise<boolean> {
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')
    if (cmdline.split('\0').includes(marker)) return true
  }
  return false
}

/** Opens a socket; collects its binary output as text. */
function open(url: string, headers: Record<string, string> = {}) {
  const ws = new WebSocket(url, { headers })
  let output = ''
  let wake: (() => void) | null = null
  ws.on('message', (data: Buffer, isBinary) => {
    if (isBinary) output += data.toString('utf8')
    wake?.()
  })
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }))
  )
  return {
    ws,
    closed,
    opened: new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve())
      ws.once('error', reject)
    }),
    /** resolves when the output so far matches */
    async waitFor(pattern: RegExp): Promise<RegExpMatchArray> {
      // a guard against hanging forever, not a timing threshold
      const giveUp = Date.now() + 30_000
      for (;;) {
        const match = output.match(pattern)
        if (match) return match
        if (Date.now() > giveUp) throw new Error(`${pattern} never appeared in ${JSON.stringify(output)}`)
        await new Promise<void>((resolve) => {
          wake = resolve
          setTimeout(resolve, 1000)
        })
      }
    },
    get output() {
      return output
    }
  }
}

/** The HTTP status a refused handshake answers (and that no 101 happened). */
function refused(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.on('open', () => reject(new Error('the upgrade was accepted')))
    ws.on('error', () => {})
    ws.on('unexpected-response', (_req, res) => {
      let body = ''
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString()
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
  })
}

t.test('echo hello through the terminal, and a resize takes effect', embeddedOnly, async (t) => {
  const { base, runId, origin } = await setup()
  const term = open(`${base}/api/runs/${runId}/terminal`, { origin })
  await term.opened
  term.ws.send(Buffer.from('echo hello\r'), { binary: true })
  await term.waitFor(/[\r\n]hello\r?\n/)
  t.pass('hello came back')

  term.ws.send(JSON.stringify({ type: 'resize', cols: 100, rows: 40 }))
  term.ws.send(Buffer.from('stty size\r'), { binary: true })
  await term.waitFor(/[\r\n]40 100\r?\n/)
  t.pass('stty sees the new size')

  // a text frame that is not a valid control message changes nothing
  term.ws.send('{"type":"resize","cols":-1,"rows":"x"}')
  term.ws.send('not json')
  term.ws.send(Buffer.from('stty size; echo done-$((6*7))\r'), { binary: true })
  await term.waitFor(/40 100\r?\ndone-42/)
  t.pass('bad control frames were ignored')

  term.ws.send(Buffer.from('exit\r'), { binary: true })
  const { code } = await term.closed
  t.equal(code, 1000, 'the socket closes when the shell exits')
})

t.test('the terminal runs in the thread workspace', embeddedOnly, async (t) => {
  const { app, base, runId, threadId } = await setup()
  const term = open(`${base}/api/runs/${runId}/terminal`)
  await term.opened
  term.ws.send(Buffer.from('echo from-terminal > t.txt && echo wrote-$((1+1))\r'), { binary: true })
  await term.waitFor(/wrote-2/)
  const { sandbox, release } = await app.runtime.sandboxes!.acquire({ orgId: DEV_ORG.id, threadId })
  t.equal((await sandbox.readFile('t.txt')).content, 'from-terminal\n')
  release()
  if (app.runtime.sandboxes!.provider.confinement === 'bwrap') {
    // the sandbox's first process names no host path (DATA_DIR's, the workspace's)
    term.ws.send(Buffer.from('tr "\\0" " " < /proc/1/cmdline; echo; echo pid1-$((2+2))\r'), { binary: true })
    const [, pid1] = (await term.waitFor(/\n([^\n]*)\r?\n[^\n]*pid1-4/))!
    t.match(pid1!, /\bbwrap --args 3 -- /, "pid 1 is bubblewrap's, its options read from a descriptor")
    t.notOk(pid1!.includes(app.runtime.sandboxes!.provider.workspaceRoot!), 'no host path in it')
  }
  term.ws.close()
  await term.closed
})

t.test('the socket closes when the sandbox goes', embeddedOnly, async (t) => {
  const { app, base, runId, threadId } = await setup()
  const term = open(`${base}/api/runs/${runId}/terminal`)
  await term.opened
  term.ws.send(Buffer.from('echo ready-$((2*2))\r'), { binary: true })
  await term.waitFor(/ready-4/)
  await app.runtime.sandboxes!.destroy({ orgId: DEV_ORG.id, threadId })
  const { code, reason } = await term.closed
  t.equal(code, 1001)
  t.equal(reason, 'sandbox stopped')
})

t.test(
  'closing the socket ends the shell and what it started',
  {
    skip:
      embeddedPassOnly || probeBubblewrap().ok
        ? false
        : 'needs bubblewrap (plain processes can leave setsid children behind)'
  },
  async (t) => {
    const { base, runId } = await setup()
    const term = open(`${base}/api/runs/${runId}/terminal`)
    await term.opened
    const marker = String(100_000 + Math.floor(Math.random() * 800_000))
    term.ws.send(Buffer.from(`sleep ${marker} & echo started-$((3*3))\r`), { binary: true })
    await term.waitFor(/started-9/)
    const started = Date.now() + 20_000
    while (!(await processes(marker)) && Date.now() < started) await new Promise((r) => setTimeout(r, 100))
    t.ok(await processes(marker), 'the background job runs')
    term.ws.close()
    await term.closed
    const giveUp = Date.now() + 20_000
    while ((await processes(marker)) && Date.now() < giveUp) await new Promise((r) => setTimeout(r, 100))
    t.notOk(await processes(marker), 'nothing of the terminal is left')
  }
)

t.test('open sockets can be closed for an org or user (sign-out, removed membership)', embeddedOnly, async (t) => {
  const { app, base, runId } = await setup()
  const term = open(`${base}/api/runs/${runId}/terminal`)
  await term.opened
  t.equal(app.runtime.sockets.close({ orgId: 'another-org' }), 0)
  t.equal(app.runtime.sockets.close({ orgId: DEV_ORG.id, userId: DEV_USER.id }), 1)
  const { code } = await term.closed
  t.equal(code, 1008)
})

t.test('an oversized message closes the socket with 1009', embeddedOnly, async (t) => {
  const { base, runId } = await setup()
  const term = open(`${base}/api/runs/${runId}/terminal`)
  await term.opened
  term.ws.send(Buffer.alloc(4096, 0x61), { binary: true })
  const { code } = await term.closed
  t.equal(code, 1009)
})

t.test(
  'the handshake is refused before the upgrade: anonymous, foreign origin, other org, unknown run',
  embeddedOnly,
  async (t) => {
    const { base, runs, runId } = await setup()
    const foreignRun = newId()
    runs.add(newId(), foreignRun)

    const evil = await refused(`${base}/api/runs/${runId}/terminal`, { origin: 'https://evil.com' })
    t.equal(evil.status, 403)
    t.equal(JSON.parse(evil.body).error, 'forbidden_origin')
    t.equal(
      (await refused(`${base}/api/runs/${runId}/terminal`, { origin: 'https://app.example.com.evil.com' })).status,
      403,
      'a look-alike origin'
    )
    t.equal((await refused(`${base}/api/runs/${runId}/terminal`, { origin: 'null' })).status, 403)
    t.equal(
      (await refused(`${base}/api/runs/${runId}/terminal`, { origin: base.replace('ws:', 'https:') })).status,
      403,
      'the wrong scheme'
    )
    const other = await refused(`${base}/api/runs/${foreignRun}/terminal`)
    t.equal(other.status, 404, "another org's run")
    t.equal(JSON.parse(other.body).error, 'not_found')
    t.equal((await refused(`${base}/api/runs/${newId()}/terminal`)).status, 404, 'an unknown run')
    t.equal((await refused(`${base}/api/runs/..%2F..%2Fetc/terminal`)).status, 400, 'a hostile id')

    const listed = open(`${base}/api/runs/${runId}/terminal`, { origin: 'https://app.example.com' })
    await listed.opened
    t.pass('an origin listed in CORS_ORIGINS may connect')
    listed.ws.close()
    await listed.closed
  }
)

t.test('anonymous callers get 401 before the upgrade when dev-org access is off', embeddedOnly, async (t) => {
  const { base, runId } = await setup({ t, env: { ALLOW_DEV_ORG: 'false' } })
  const res = await refused(`${base}/api/runs/${runId}/terminal`)
  t.equal(res.status, 401)
  t.equal(JSON.parse(res.body).error, 'unauthorized')
})

t.test('no sandbox provider: 503 before the upgrade', embeddedOnly, async (t) => {
  const { base, runId } = await setup({ t, env: { SANDBOX_PROVIDER: 'none' } })
  const res = await refused(`${base}/api/runs/${runId}/terminal`)
  t.equal(res.status, 503)
  t.equal(JSON.parse(res.body).error, 'sandbox_unavailable')
})
