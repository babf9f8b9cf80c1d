import { spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chown, mkdtemp, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises'
import { connect, createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { embeddedOnly, embeddedPassOnly } from '../passes.js'
import WebSocket from 'ws'
import { DEV_ORG } from '../../src/auth/dev-org.js'
import { newId } from '../../src/db/ids.js'
import { BOX_HOME, findExecutable, probeBubblewrap, sandboxUserFor } from '../../src/runtime/bubblewrap.js'
import { startDesktop, stopDesktop } from '../../src/runtime/desktop.js'
import type { RuntimeWiring } from '../../src/runtime/service.js'
import type { DesktopEndpoint, Sandbox, SandboxProvider } from '../../src/runtime/sandbox.js'
import type { EnvOverrides, Teardown } from '../helper.js'
import { fakeRuns } from './fakes.js'
import { buildRuntimeApp } from './group.js'

async function setup(t: Teardown, options: { env?: EnvOverrides; provider?: SandboxProvider } = {}) {
  const dataDir = await mkdtemp(join(tmpdir(), 'cairn-desktop-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const runs = fakeRuns()
  const runtime: RuntimeWiring = { runs, ...(options.provider ? { sandboxProvider: options.provider } : {}) }
  const app = await buildRuntimeApp(t, {
    env: { DATA_DIR: dataDir, SANDBOX_UNCONFINED: 'true', ...options.env },
    runtime
  })
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
const bwrap = probeBubblewrap()
const bwrapSkip = bwrap.ok ? false : `bubblewrap cannot confine here: ${bwrap.reason}`

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
    t.ok(
      types.includes(1),
      'security type None (x11vnc on a unix socket in a private folder, reachable only through the proxy)'
    )
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

/** The processes under `pid` (children, grandchildren ...), by their host pid. */
async function descendants(pid: number): Promise<number[]> {
  const found: number[] = []
  for (const task of await readdir(`/proc/${pid}/task`).catch(() => [])) {
    const children = await readFile(`/proc/${pid}/task/${task}/children`, 'utf8').catch(() => '')
    for (const child of children.split(' ').filter(Boolean).map(Number)) {
      found.push(child, ...(await descendants(child)))
    }
  }
  return found
}

t.test(
  "the desktop runs in a bubblewrap sandbox of its own: the sandbox's user, no network, none of the host",
  { skip: embeddedPassOnly || (hasDesktop ? bwrapSkip : 'Xvfb and x11vnc are not installed') },
  async (t) => {
    const user = sandboxUserFor({ uid: 65534, gid: 65534 })
    const desktop = await startDesktop({ user })
    t.teardown(() => stopDesktop(desktop))
    t.same(desktop.display.display, 0, 'its display is the only one it sees')
    t.ok('path' in desktop.endpoint, 'the VNC server listens on a unix socket')
    const greeting = await new Promise<string>((resolve, reject) => {
      const socket = connect((desktop.endpoint as { path: string }).path)
      socket.once('data', (chunk: Buffer) => {
        socket.destroy()
        resolve(chunk.toString('latin1'))
      })
      socket.once('error', reject)
    })
    t.equal(greeting, 'RFB 003.008\n', 'the VNC server greets there')

    const pids = await descendants(desktop.processes[0]!.pid!)
    const named = new Map<string, number>()
    for (const pid of pids) named.set((await readFile(`/proc/${pid}/comm`, 'utf8')).trim(), pid)
    t.ok(named.has('Xvfb') && named.has('x11vnc'), `Xvfb and x11vnc run under bubblewrap (${[...named.keys()]})`)
    const ownNet = await readlink('/proc/self/ns/net')
    const ownPid = await readlink('/proc/self/ns/pid')
    for (const name of ['Xvfb', 'x11vnc']) {
      const pid = named.get(name)!
      const status = await readFile(`/proc/${pid}/status`, 'utf8')
      const uid = process.geteuid!()
      t.match(status, new RegExp(`\\nUid:\\s+${user ? user.uid : uid}\\s`), `${name} runs as the sandbox's user`)
      t.match(status, /\nNoNewPrivs:\s+1/, `${name} cannot gain privileges`)
      if (user) t.match(status, /\nCapEff:\s+0+\n/, `${name} has no capabilities`)
      t.not(await readlink(`/proc/${pid}/ns/net`), ownNet, `${name} has a network namespace of its own (no network)`)
      t.not(await readlink(`/proc/${pid}/ns/pid`), ownPid, `${name} sees only its sandbox's processes`)
      // its view of the file system, through the host's /proc (the test runs as root or as the same user)
      const root = `/proc/${pid}/root`
      t.notOk(existsSync(`${root}/etc/shadow`), `${name} has no /etc/shadow`)
      t.notOk(existsSync(`${root}${BOX_HOME}`), `${name} has no workspace`)
      t.notOk(existsSync(`${root}${process.cwd()}`), `${name} does not see the service's files`)
      const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0')
      if (name === 'x11vnc') {
        t.ok(argv.includes('-noremote') && argv.includes('-nocmds') && argv.includes('-norc'), 'no remote control')
        t.same(
          argv.filter((a) => /^-(R|remote|yesremote|ultrafilexfer|tightfilexfer|rfbversion)$/.test(a)),
          [],
          'nothing that turns remote control or file transfer on'
        )
      }
    }
    const tcp = await readFile(`/proc/${named.get('x11vnc')}/net/tcp`, 'utf8')
    const tcp6 = await readFile(`/proc/${named.get('x11vnc')}/net/tcp6`, 'utf8')
    t.equal(tcp.trim().split('\n').length + tcp6.trim().split('\n').length, 2, 'no TCP socket at all in its namespace')
  }
)

/** A FramebufferUpdateRequest for one pixel. */
function frameRequest(): Buffer {
  const update = Buffer.alloc(10)
  update.writeUInt8(3, 0)
  update.writeUInt16BE(1, 6)
  update.writeUInt16BE(1, 8)
  return update
}

/** Sends an UltraVNC file transfer request (a directory listing) and tells what came back before a frame. */
async function ultraFileTransfer(client: ReturnType<typeof rfbClient>, dir: string): Promise<string> {
  const name = Buffer.from(dir, 'latin1')
  const request = Buffer.alloc(12)
  request.writeUInt8(7, 0) // rfbFileTransfer
  request.writeUInt8(1, 1) // rfbDirContentRequest
  request.writeUInt8(1, 2) // rfbRDirContent
  request.writeUInt32BE(name.length, 8)
  client.ws.send(Buffer.concat([request, name]))
  // then a framebuffer update request: its answer comes after any answer to the transfer
  client.ws.send(frameRequest())
  try {
    const type = (await client.read(1))[0]!
    return type === 0 ? 'a frame, and no file transfer answer' : `a message of type ${type}`
  } catch {
    return 'the connection closed'
  }
}

async function rfbSession(url: string) {
  const client = rfbClient(url)
  await client.opened
  const version = (await client.read(12)).toString('latin1')
  client.ws.send(Buffer.from('RFB 003.008\n', 'latin1'))
  await client.read((await client.read(1))[0]!)
  client.ws.send(Buffer.from([1]))
  await client.read(4)
  client.ws.send(Buffer.from([1]))
  const init = await client.read(24)
  await client.read(init.readUInt32BE(20))
  const bytesPerPixel = init[4]! / 8
  return {
    client,
    version,
    /** asks for a pixel and reads the whole update (raw rectangles: the client asked for no other encoding) */
    async frame(): Promise<void> {
      client.ws.send(frameRequest())
      const header = await client.read(4)
      if (header[0] !== 0) throw new Error(`server message ${header[0]}, not a frame`)
      for (let rects = header.readUInt16BE(2); rects > 0; rects--) {
        const rect = await client.read(12)
        await client.read(rect.readUInt16BE(4) * rect.readUInt16BE(6) * bytesPerPixel)
      }
    }
  }
}

/**
 * The attacker's path to the member's desktop: a command of the thread (the terminal's or a
 * run's shell tool) asks x11vnc, through the display, to turn file transfer on (or to stop),
 * then a VNC client asks the proxy for a file transfer. None of it may work.
 */
async function attackerPath(t: Test, { app, base, threadId }: Awaited<ReturnType<typeof setup>>) {
  const url = `${base}/api/desktop-proxy/${threadId}/websockify`
  // the member's desktop, open throughout (when the last connection ends, the sandbox stops)
  const member = await rfbSession(url)
  t.teardown(() => member.client.ws.close())
  await member.frame()
  const { sandbox, release } = await app.runtime.sandboxes!.acquire({ orgId: DEV_ORG.id, threadId })
  t.teardown(release)
  const first = await rfbSession(url)
  t.equal(first.version, 'RFB 003.008\n')
  t.equal(await ultraFileTransfer(first.client, 'C:\\etc'), 'the connection closed', 'file transfer is refused')

  // the attacker: a command of the thread (the terminal's or a run's shell tool) asks x11vnc,
  // through the display, to turn file transfer on (twice: an x11vnc that takes remote
  // control may miss a display client's first request)
  const x11vnc = (request: string) =>
    sandbox.exec(`timeout 20 x11vnc -display "$DISPLAY" -sync -R ${request} 2>&1`, { timeoutMs: 60_000 })
  for (const attempt of [1, 2]) {
    const asked = await x11vnc('ultrafilexfer')
    t.match(asked.stdout, /sending remote command: "cmd=ultrafilexfer"/, `request ${attempt} was sent`)
    t.notMatch(asked.stdout, /ack=1/, `x11vnc did not acknowledge request ${attempt}`)
  }
  const second = await rfbSession(url)
  t.equal(second.version, 'RFB 003.008\n', 'no UltraVNC protocol version (3.6)')
  t.equal(await ultraFileTransfer(second.client, 'C:\\etc'), 'the connection closed', 'file transfer is still refused')

  // nor can it stop the member's desktop
  t.notMatch((await x11vnc('stop')).stdout, /ack=1/, 'x11vnc did not acknowledge the stop')
  await member.frame()
  t.pass("the member's desktop still runs")
}

t.test(
  "from the sandbox, x11vnc's remote control cannot turn on file transfer for the member's VNC client, nor stop it",
  { skip: embeddedPassOnly || (hasDesktop ? false : 'Xvfb and x11vnc are not installed') },
  async (t) => attackerPath(t, await setup(t))
)

/** The service's user in the next test: it runs as root, and starts the provider as nobody. */
const NOBODY = 65534
const AS_NOBODY = [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', '--inh-caps=-all']

/** Why the provider cannot be run here as an unprivileged service user, or false. */
function asNobodySkip(): string | false {
  if (embeddedPassOnly) return embeddedPassOnly
  if (!hasDesktop) return 'Xvfb and x11vnc are not installed'
  if (process.geteuid?.() !== 0) return 'the test must run as root to start the provider as another user (nobody)'
  if (findExecutable('setpriv') === null) return 'setpriv (util-linux) is not installed'
  if (findExecutable('bwrap') === null) return 'bwrap is not installed'
  const probe = spawnSync(
    'setpriv',
    [...AS_NOBODY, 'bwrap', '--unshare-user', '--unshare-pid', '--ro-bind', '/', '/', '--proc', '/proc', 'true'],
    { timeout: 5000, encoding: 'utf8', cwd: '/' }
  )
  if (probe.status !== 0)
    return `bubblewrap cannot create a user namespace as nobody here: ${(probe.stderr || probe.error?.message || `exit ${probe.status}`).trim()}`
  return false
}

/**
 * The local provider in a process of its own running as nobody (./service-as-user.ts), as a
 * provider of this process: its sandboxes' commands and desktop run there, in bubblewrap
 * in a user namespace, as they would for a service run by an unprivileged user.
 */
async function providerAsNobody(t: Teardown, dataDir: string, env: Record<string, string>) {
  const child = spawn(
    'setpriv',
    // without the test runner's NODE_OPTIONS: its process tracking would write in the worktree, nobody's to read only
    [
      ...AS_NOBODY,
      'env',
      '-u',
      'NODE_OPTIONS',
      process.execPath,
      '--import=tsx',
      fileURLToPath(new URL('./service-as-user.ts', import.meta.url))
    ],
    {
      cwd: process.cwd(),
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', TMPDIR: tmpdir(), DATA_DIR: dataDir, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc']
    }
  )
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  t.teardown(async () => {
    child.disconnect?.()
    await exited
  })
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>()
  let ids = 0
  let gone = false
  const ready = new Promise<{ ready: boolean; error?: string; pid: number; uid: number; user: unknown }>(
    (resolve, reject) => {
      child.once('error', reject)
      void exited.then(() => {
        gone = true
        reject(new Error('the provider exited before it was ready'))
        for (const p of pending.values()) p.reject(new Error('the provider exited'))
      })
      child.on('message', (m: { id?: number; result?: unknown; error?: string; ready?: boolean }) => {
        if (m.id === undefined) return resolve(m as never)
        const p = pending.get(m.id)!
        pending.delete(m.id)
        if (m.error !== undefined) p.reject(new Error(m.error))
        else p.resolve(m.result)
      })
    }
  )
  const call = <T>(request: object): Promise<T> =>
    gone
      ? Promise.reject(new Error('the provider exited'))
      : new Promise<T>((resolve, reject) => {
          const id = ++ids
          pending.set(id, { resolve: resolve as (v: unknown) => void, reject })
          child.send({ id, ...request })
        })
  const unsupported = () => Promise.reject(new Error('not in this test'))
  const provider: SandboxProvider = {
    name: 'local',
    confinement: 'bwrap',
    desktopAvailable: true,
    async create(key) {
      await call({ op: 'create', ...key })
      const listeners = new Set<() => void>()
      const sandbox: Sandbox = {
        key,
        destroyed: false,
        exec: (command, options) => call({ op: 'exec', command, timeoutMs: options?.timeoutMs }),
        readFile: unsupported,
        writeFile: unsupported,
        listFiles: unsupported,
        spawnPty: () => {
          throw new Error('not in this test')
        },
        desktop: () => call({ op: 'desktop' }),
        onDestroy: (listener) => {
          listeners.add(listener)
          return () => listeners.delete(listener)
        },
        destroy: async () => {
          await call({ op: 'destroy' }).catch(() => {})
          for (const listener of listeners) listener()
        }
      }
      return sandbox
    }
  }
  return { provider, ready: await ready }
}

t.test(
  'the service as an unprivileged user (bubblewrap in a user namespace): the same attacker path fails, and the sandbox sees none of the host',
  { skip: asNobodySkip() },
  async (t) => {
    // the provider's files: a DATA_DIR of nobody's own, with a file only nobody can read
    const dataDir = await mkdtemp(join(tmpdir(), 'cairn-nobody-'))
    t.teardown(() => rm(dataDir, { recursive: true, force: true }))
    await chown(dataDir, NOBODY, NOBODY)
    const secret = join(dataDir, 'secrets.key')
    await writeFile(secret, 'HOST-SECRETS-KEY', { mode: 0o600 })
    await chown(secret, NOBODY, NOBODY)
    // the service's own environment (where SECRETS_KEY lives)
    const { provider, ready } = await providerAsNobody(t, dataDir, { CAIRN_CONFINEMENT_PROBE: 'SERVICE-ENVIRONMENT' })
    t.same(
      ready,
      { ready: true, pid: ready.pid, uid: NOBODY, confinement: 'bwrap', user: null },
      'the provider runs as nobody and confines with bubblewrap in a user namespace (no user to drop to)'
    )

    const session = await setup(t, { provider })
    await attackerPath(t, session)

    // the desktop, seen from the host: nobody's processes, in a user namespace of their own
    const named = new Map<string, number>()
    for (const pid of await descendants(ready.pid))
      named.set((await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '')).trim(), pid)
    t.ok(named.has('Xvfb') && named.has('x11vnc'), `Xvfb and x11vnc run under the provider (${[...named.keys()]})`)
    const ownUser = await readlink('/proc/self/ns/user')
    const ownNet = await readlink('/proc/self/ns/net')
    for (const name of ['Xvfb', 'x11vnc']) {
      const pid = named.get(name)!
      t.match(
        await readFile(`/proc/${pid}/status`, 'utf8'),
        new RegExp(`\\nUid:\\s+${NOBODY}\\s`),
        `${name} is nobody on the host`
      )
      t.not(await readlink(`/proc/${pid}/ns/user`), ownUser, `${name} is in a user namespace`)
      t.not(await readlink(`/proc/${pid}/ns/net`), ownNet, `${name} has no network`)
    }

    // the sandbox's commands: their own processes only, nothing of the provider's files or environment
    const { sandbox, release } = await session.app.runtime.sandboxes!.acquire({
      orgId: DEV_ORG.id,
      threadId: session.threadId
    })
    t.teardown(release)
    const processes = (
      await sandbox.exec('for p in /proc/[0-9]*; do printf "%s: " "$p"; tr "\\0" " " < "$p/cmdline"; echo; done')
    ).stdout
    const lines = processes.split('\n').filter((l) => l.startsWith('/proc/'))
    t.ok(lines.length > 0 && lines.length <= 4, `only the command's own processes: ${JSON.stringify(lines)}`)
    t.notMatch(processes, /node|tsx|tap|Xvfb|x11vnc/, "none of the provider's processes, nor the desktop's")
    t.notOk(processes.includes(dataDir), 'no host path (DATA_DIR) in any command line')
    const secrets = await sandbox.exec(`cat ${secret} /proc/${ready.pid}/environ 2>&1; id -u; true`)
    t.notMatch(
      secrets.stdout,
      /HOST-SECRETS-KEY|SERVICE-ENVIRONMENT/,
      "neither nobody's DATA_DIR nor the provider's environment"
    )
    t.match(secrets.stdout, /No such file/)
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
