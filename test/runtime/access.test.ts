import { mkdtemp, rm } from 'node:fs/promises'
import { networkInterfaces, tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import WebSocket from 'ws'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { ConfigError } from '../../src/config.js'
import { newId } from '../../src/db/ids.js'
import { probeBubblewrap, type BubblewrapProbe } from '../../src/runtime/bubblewrap.js'
import { buildTestApp, testConfig, type EnvOverrides, type Teardown } from '../helper.js'
import { eventRecorder, fakeRuns } from './fakes.js'

/**
 * Who may reach a sandbox: the dev org only from loopback, and nothing
 * runs outside bubblewrap unless SANDBOX_UNCONFINED=true.
 */

const MISSING: BubblewrapProbe = { ok: false, installed: false, reason: 'bwrap is not installed' }
const BROKEN: BubblewrapProbe = { ok: false, installed: true, reason: 'bwrap: setting up uid map: Permission denied' }

async function build(t: Teardown, env: EnvOverrides, options: { probe?: BubblewrapProbe; host?: string } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-access-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const runs = fakeRuns()
  const probe = options.probe
  const app = await buildTestApp(t, {
    env: { DATA_DIR: dataDir, ...env },
    runtime: { runs, events: eventRecorder(), ...(probe ? { bubblewrapProbe: () => probe } : {}) }
  })
  const host = options.host ?? '127.0.0.1'
  await app.listen({ port: 0, host })
  const { port } = app.server.address() as { port: number }
  const runId = newId()
  runs.add(DEV_ORG.id, runId)
  const authority = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`
  return { app, runs, runId, base: `ws://${authority}` }
}

/** The HTTP answer of a refused handshake (and that no 101 happened). */
function refused(
  url: string,
  headers: Record<string, string> = {}
): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers })
    ws.on('open', () => {
      ws.close()
      reject(new Error('the upgrade was accepted'))
    })
    ws.on('error', () => {})
    ws.on('unexpected-response', (_req, res) => {
      let body = ''
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString()
      })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(body) }))
    })
  })
}

function opens(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url)
    ws.once('open', () => {
      ws.close()
      ws.once('close', () => resolve())
    })
    ws.once('error', reject)
  })
}

/** An address of this host that is not loopback, if it has one. */
function externalAddress(): string | null {
  for (const list of Object.values(networkInterfaces())) {
    for (const info of list ?? []) if (!info.internal && info.family === 'IPv4') return info.address
  }
  return null
}

const external = externalAddress()

t.test(
  'dev org on: terminal and desktop refuse a caller from another address with 401 before the upgrade',
  async (t) => {
    const unconfined = { SANDBOX_UNCONFINED: 'true', TRUST_PROXY: '127.0.0.1' }
    const { base, runId } = await build(t, unconfined)
    const terminal = `${base}/api/runs/${runId}/terminal`
    const desktop = `${base}/api/desktop-proxy/${runId}/websockify`
    for (const url of [terminal, desktop]) {
      const res = await refused(url, { 'x-forwarded-for': '203.0.113.7' })
      t.equal(res.status, 401, `${url} through a trusted proxy from 203.0.113.7`)
      t.same(res.body, { error: 'unauthorized', message: 'sign in or send an API key' })
    }
    await opens(terminal)
    t.pass('from loopback the dev terminal opens')
  }
)

t.test(
  'dev org on: a real socket from a non-loopback interface gets 401',
  { skip: external ? false : 'this host has no non-loopback IPv4 address' },
  async (t) => {
    const { base, runId, app } = await build(t, { SANDBOX_UNCONFINED: 'true' }, { host: external! })
    const res = await refused(`${base}/api/runs/${runId}/terminal`)
    t.equal(res.status, 401)
    t.equal(res.body.error, 'unauthorized')
    const config = await fetch(`${base.replace('ws:', 'http:')}/api/config`)
    t.equal(
      ((await config.json()) as { allowDevOrg: boolean }).allowDevOrg,
      false,
      '/api/config tells that caller the dev org is closed to it'
    )
    const runs = await fetch(`${base.replace('ws:', 'http:')}/api/runs`)
    t.equal(runs.status, 401)
    t.equal(app.runtime.sockets.size, 0)
  }
)

t.test(
  'without bubblewrap there is no sandbox: 503 sandbox_unavailable naming bubblewrap, and /api/config says so',
  async (t) => {
    const { app, base, runId } = await build(t, {}, { probe: MISSING })
    const config = (await app.inject({ url: '/api/config' })).json()
    t.same(config.sandbox, { provider: 'none', available: false, confinement: null, reason: config.sandbox.reason })
    t.match(config.sandbox.reason, /bubblewrap \(bwrap\) is not installed/)
    t.match(config.sandbox.reason, /SANDBOX_UNCONFINED=true/)
    t.equal(config.capabilities.toolGateway, false, 'no tools are offered to engines')

    for (const url of [`${base}/api/runs/${runId}/terminal`, `${base}/api/desktop-proxy/${runId}/websockify`]) {
      const res = await refused(url)
      t.equal(res.status, 503, url)
      t.same(res.body, { error: 'sandbox_unavailable', message: config.sandbox.reason })
    }
    const tool = await app.runtime.gateway.execute({ orgId: DEV_ORG.id, runId, name: 'list_files', arguments: {} })
    t.equal(tool.status, 'error')
    t.match(tool.content, /^error: sandbox_unavailable: .*bubblewrap/)

    const broken = await build(t, {}, { probe: BROKEN })
    const reason = (await broken.app.inject({ url: '/api/config' })).json().sandbox.reason
    t.match(reason, /bubblewrap cannot create a sandbox on this server/)
    t.notMatch(reason, /uid map/, "the host's error text stays in the log")
    const res = await refused(`${broken.base}/api/runs/${broken.runId}/terminal`)
    t.equal(res.status, 503)
    t.equal(res.body.error, 'sandbox_unavailable')
  }
)

t.test(
  'SANDBOX_UNCONFINED=true: without bubblewrap commands run as plain processes, and /api/config says so',
  async (t) => {
    const { app, base, runId } = await build(t, { SANDBOX_UNCONFINED: 'true' }, { probe: MISSING })
    const config = (await app.inject({ url: '/api/config' })).json()
    t.same(config.sandbox, { provider: 'local', available: true, confinement: 'none', reason: null })
    t.equal(config.capabilities.toolGateway, true)
    await opens(`${base}/api/runs/${runId}/terminal`)
    t.pass('the terminal opens')
  }
)

t.test('this host, unforced: bubblewrap confines, or there is no sandbox', async (t) => {
  const { app } = await build(t, {})
  const { sandbox } = (await app.inject({ url: '/api/config' })).json()
  if (probeBubblewrap().ok) t.same(sandbox, { provider: 'local', available: true, confinement: 'bwrap', reason: null })
  else t.match(sandbox, { provider: 'none', available: false, confinement: null, reason: /bubblewrap/ })
})

t.test('SANDBOX_CONFINEMENT=none needs SANDBOX_UNCONFINED=true', async (t) => {
  t.throws(() => testConfig({ SANDBOX_CONFINEMENT: 'none' }), ConfigError)
  t.throws(() => testConfig({ SANDBOX_CONFINEMENT: 'none' }), /SANDBOX_UNCONFINED=true/)
  t.equal(testConfig({ SANDBOX_CONFINEMENT: 'none', SANDBOX_UNCONFINED: 'true' }).SANDBOX_CONFINEMENT, 'none')
  t.equal(testConfig().SANDBOX_UNCONFINED, false, 'off by default')
  const { app } = await build(t, { SANDBOX_CONFINEMENT: 'none', SANDBOX_UNCONFINED: 'true' })
  t.match((await app.inject({ url: '/api/config' })).json().sandbox, { available: true, confinement: 'none' })
})
