import { mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedOnly, embeddedPassOnly } from '../passes.js'
import WebSocket from 'ws'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newId } from '../../src/db/ids.js'
import { findExecutable } from '../../src/runtime/bubblewrap.js'
import { freePort, startDesktop, stopAll } from '../../src/runtime/desktop.js'
import type { RuntimeWiring } from '../../src/runtime/service.js'
import type { DesktopEndpoint, Sandbox, SandboxProvider } from '../../src/runtime/sandbox.js'
import { buildTestApp, type EnvOverrides, type Teardown } from '../helper.js'
import { fakeRuns } from './fakes.js'

async function setup(t: Teardown, options: { env?: EnvOverrides; provider?: SandboxProvider } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-desktop-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const runs = fakeRuns()
  const runtime: RuntimeWiring = { runs, ...(options.provider ? { sandboxProvider: options.provider } : {}) }
  const app = await buildTestApp(t, { env: { DATA_DIR: dataDir, SANDBOX_UNCONFINED: 'true', ...options.env }, runtime })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  const threadId = newId()
  runs.add(DEV_ORG.id, threadId)
  return { app, runs, threadId, base: `ws://127.0.0.1:${port}` }
}

/** A noVNC-like client: reads the socket as one byte stream. */
function rfbClient(url: string, headers: Record<string, string> = {}) {
  const ws = new WebSocket(url, ['binary'], { headers })
  let buffered = Buffer.alloc(0)
  let wake: (() => void) | null = null
  ws.on('message', (data: Buffer) => {
    buffered = Buffer.concat([buffered, data])
    wake?.()
  })
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => {
      resolve({ code, reason: reason.toString() })
      wake?.()
    })
  )
  return {
    ws,
    closed,
    opened: new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve())
      ws.once('error', reject)
    }),
    async read(n: number): Promise<Buffer> {
      while (buffered.length < n) {
        if (ws.readyState === ws.CLOSED) {
          const { code, reason } = await closed
          throw new Error(`closed (${code} ${reason}) after ${buffered.length} of ${n} bytes`)
        }
        await new Promise<void>((resolve) => {
          wake = resolve
        })
      }
      const out = buffered.subarray(0, n)
      buffered = buffered.subarray(n)
      return out
    }
  }
}

function refused(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['binary'], { headers })
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

/**
 * A sandbox provider whose only working part is a desktop at a fixed endpoint (chosen by the test, never the request).
 */
function desktopOnlyProvider(endpoint: DesktopEndpoint | null): SandboxProvider & { created: string[] } {
  const created: string[] = []
  const unsupported = () => Promise.reject(new Error('not in this test'))
  return {
    name: 'test',
    confinement: 'none',
    desktopAvailable: endpoint !== null,
    created,
    async create(key) {
      created.push(`${key.orgId}/${key.threadId}`)
      const sandbox: Sandbox = {
        key,
        destroyed: false,
        exec: unsupported,
        readFile: unsupported,
        writeFile: unsupported,
        listFiles: unsupported,
        spawnPty: () => {
          throw new Error('not in this test')
        },
        desktop: async () => endpoint!,
        onDestroy: () => () => {},
        destroy: async () => {}
      }
      return sandbox
    }
  }
}

const hasDesktop = findExecutable('Xvfb') !== null && findExecutable('x11vnc') !== null

t.test(
  "a real RFB handshake through the proxy to the local provider's VNC server",
  { skip: embeddedPassOnly || hasDesktop ? false : 'Xvfb and x11vnc are not installed' },
  async (t) => {
    const { app, base, threadId } = await setup(t)
    const client = rfbClient(`${base}/api/desktop-proxy/${threadId}/websockify`)
    await client.opened
    t.equal(client.ws.protocol, 'binary', 'the binary subprotocol noVNC asks for')
    t.equal((await client.read(12)).toString('latin1'), 'RFB 003.008\n', 'the server greets with its version')
    client.ws.send(Buffer.from('RFB 003.008\n', 'latin1'))
    const count = (await client.read(1))[0]!
    t.ok(count > 0, 'security types offered')
    const types = [...(await client.read(count))]
    t.ok(types.includes(1), 'security type None (x11vnc bound to loopback, reachable only through the proxy)')
    client.ws.send(Buffer.from([1]))
    t.equal((await client.read(4)).readUInt32BE(0), 0, 'security handshake succeeded')
    client.ws.send(Buffer.from([1])) // ClientInit, shared
    const init = await client.read(24)
    t.equal(init.readUInt16BE(0), 1280, 'framebuffer width')
    t.equal(init.readUInt16BE(2), 800, 'framebuffer height')

    // the thread's commands draw on that display, and see only its socket
    const { sandbox, release } = await app.runtime.sandboxes!.acquire({ orgId: DEV_ORG.id, threadId })
    const seen = await sandbox.exec('echo "$DISPLAY"; ls /tmp/.X11-unix')
    release()
    const [display, sockets] = seen.stdout.split('\n')
    t.match(display, /^:\d+$/)
    if (app.runtime.sandboxes!.provider.confinement === 'bwrap')
      t.equal(sockets, `X${display!.slice(1)}`, 'no other display is visible')
    client.ws.close()
    await client.closed
  }
)

t.test(
  'x11vnc started on a port another socket took meanwhile starts again on another',
  { skip: embeddedPassOnly || hasDesktop ? false : 'Xvfb and x11vnc are not installed' },
  async (t) => {
    const taken = createServer()
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
    t.teardown(() => new Promise<void>((resolve) => taken.close(() => resolve())))
    const takenPort = (taken.address() as AddressInfo).port
    const given: number[] = []
    // the first port offered is the taken one, as when a socket took it after it was found free
    const desktop = await startDesktop(async () => {
      const port = given.length === 0 ? takenPort : await freePort()
      given.push(port)
      return port
    })
    t.teardown(() => stopAll(desktop.processes))
    t.equal(given.length, 2, 'a second port was asked for')
    t.equal(desktop.endpoint.port, given[1], 'and the desktop listens there')
    const greeting = await new Promise<string>((resolve, reject) => {
      const socket = connect(desktop.endpoint.port, desktop.endpoint.host)
      socket.once('data', (chunk: Buffer) => {
        socket.destroy()
        resolve(chunk.toString('latin1'))
      })
      socket.once('error', reject)
    })
    t.equal(greeting, 'RFB 003.008\n', 'the VNC server greets there')
  }
)

t.test('the proxy bridges to the target the provider names, whatever the request says', embeddedOnly, async (t) => {
  const received: Buffer[] = []
  const vnc = createServer((socket) => {
    socket.write('RFB 003.008\n')
    socket.on('data', (chunk) => {
      received.push(chunk)
      if (Buffer.concat(received).length >= 12) socket.write(Buffer.from([1, 1]))
    })
  })
  await new Promise<void>((resolve) => vnc.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => vnc.close(() => resolve())))
  const provider = desktopOnlyProvider({ host: '127.0.0.1', port: (vnc.address() as AddressInfo).port })
  const { base, threadId } = await setup(t, { provider })

  // query parameters naming another host or port are not read
  const client = rfbClient(`${base}/api/desktop-proxy/${threadId}/websockify?host=10.0.0.1&port=22&token=x`)
  await client.opened
  t.equal((await client.read(12)).toString('latin1'), 'RFB 003.008\n')
  client.ws.send(Buffer.from('RFB 003.008\n', 'latin1'))
  t.same([...(await client.read(2))], [1, 1], 'the reply to the client version came back')
  t.equal(Buffer.concat(received).toString('latin1'), 'RFB 003.008\n', 'the client bytes reached the target unchanged')
  t.same(provider.created, [`${DEV_ORG.id}/${threadId}`], "the sandbox of the caller's org and thread")
  client.ws.close()
  await client.closed
})

t.test('a desktop that cannot start closes with 1011 and a reason', embeddedOnly, async (t) => {
  const provider = desktopOnlyProvider({ host: '127.0.0.1', port: 1 })
  provider.create = async (key) => ({
    key,
    destroyed: false,
    exec: () => Promise.reject(new Error('x')),
    readFile: () => Promise.reject(new Error('x')),
    writeFile: () => Promise.reject(new Error('x')),
    listFiles: () => Promise.reject(new Error('x')),
    spawnPty: () => {
      throw new Error('x')
    },
    desktop: async () => {
      throw new (await import('../../src/runtime/sandbox.js')).SandboxError('unavailable', 'Xvfb exited (1)')
    },
    onDestroy: () => () => {},
    destroy: async () => {}
  })
  const { base, threadId } = await setup(t, { provider })
  const client = rfbClient(`${base}/api/desktop-proxy/${threadId}/websockify`)
  await client.opened
  const { code, reason } = await client.closed
  t.equal(code, 1011)
  t.equal(reason, 'Xvfb exited (1)')
})

t.test('the handshake is refused before the upgrade', embeddedOnly, async (t) => {
  const { base, runs, threadId } = await setup(t, { provider: desktopOnlyProvider({ host: '127.0.0.1', port: 1 }) })
  const foreignThread = newId()
  runs.add(newId(), foreignThread)
  const foreign = await refused(`${base}/api/desktop-proxy/${foreignThread}/websockify`)
  t.equal(foreign.status, 404, "another org's thread")
  t.equal(JSON.parse(foreign.body).error, 'not_found')
  t.equal((await refused(`${base}/api/desktop-proxy/${newId()}/websockify`)).status, 404, 'an unknown thread')
  t.equal(
    (await refused(`${base}/api/desktop-proxy/${threadId}/websockify`, { origin: 'https://evil.com' })).status,
    403
  )
  t.equal((await refused(`${base}/api/desktop-proxy/a%20b/websockify`)).status, 400)

  const off = await setup(t, { env: { ALLOW_DEV_ORG: 'false' } })
  const anonymous = await refused(`${off.base}/api/desktop-proxy/${off.threadId}/websockify`)
  t.equal(anonymous.status, 401)
  t.equal(JSON.parse(anonymous.body).error, 'unauthorized')

  const noDesktop = await setup(t, { provider: desktopOnlyProvider(null) })
  const unavailable = await refused(`${noDesktop.base}/api/desktop-proxy/${noDesktop.threadId}/websockify`)
  t.equal(unavailable.status, 503)
  t.equal(JSON.parse(unavailable.body).error, 'desktop_unavailable')
})
