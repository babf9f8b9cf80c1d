import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { SANDBOX_PATH } from './bubblewrap.js'
import { SandboxError, type DesktopEndpoint } from './sandbox.js'

// A sandbox's desktop: an X display (Xvfb) and a VNC server (x11vnc) on loopback.

export interface DesktopProcesses {
  display: number
  endpoint: DesktopEndpoint
  processes: ChildProcess[]
}

export function stopAll(processes: ChildProcess[]): void {
  for (const p of processes) {
    if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL')
  }
}

/** A loopback port nothing listens on now (something may take it before it is used). */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolvePort(port))
    })
  })
}

/**
 * Xvfb on a display it picks itself (-displayfd), then x11vnc on a free loopback port.
 * No TCP and no abstract-namespace X socket (`-nolisten local`): a sandbox given the
 * network (SANDBOX_NETWORK) must not reach another thread's display that way; only its
 * own display's socket file is bound into it.
 */
export async function startDesktop(ports: () => Promise<number> = freePort): Promise<DesktopProcesses> {
  // Xvfb and x11vnc run outside the sandbox, as the service user: never in the workspace,
  // never with it as HOME (x11vnc reads $HOME/.x11vncrc, whose options run commands)
  const cwd = '/'
  const env = { PATH: SANDBOX_PATH, HOME: '/nonexistent' }
  const xvfb = spawn(
    'Xvfb',
    ['-displayfd', '3', '-screen', '0', '1280x800x24', '-nolisten', 'tcp', '-nolisten', 'local'],
    {
      cwd,
      env,
      stdio: ['ignore', 'ignore', 'ignore', 'pipe']
    }
  )
  const display = await new Promise<number>((resolveDisplay, reject) => {
    let text = ''
    const timer = setTimeout(() => reject(new SandboxError('unavailable', 'Xvfb did not start in time')), 15_000)
    xvfb.stdio[3]!.on('data', (chunk: Buffer) => {
      text += chunk.toString()
      const match = /^(\d+)\n/.exec(text)
      if (match) {
        clearTimeout(timer)
        resolveDisplay(Number(match[1]))
      }
    })
    xvfb.once('error', (err) => {
      clearTimeout(timer)
      reject(new SandboxError('unavailable', `Xvfb failed: ${err.message}`))
    })
    xvfb.once('exit', (code) => {
      clearTimeout(timer)
      reject(new SandboxError('unavailable', `Xvfb exited (${code})`))
    })
  }).catch((err) => {
    stopAll([xvfb])
    throw err
  })
  // x11vnc binds the port it is given, and another socket may have taken it since it was
  // free: then it exits before it listens, and starts again on another
  let vnc: ChildProcess | null = null
  let port = 0
  for (let attempt = 1; vnc === null; attempt++) {
    port = await ports()
    const started = await startVnc(display, port, cwd, env).catch((err: unknown) => {
      if (attempt < VNC_PORT_ATTEMPTS && err instanceof PortTaken) return null
      stopAll([xvfb])
      throw err
    })
    vnc = started
  }
  return { display, endpoint: { host: '127.0.0.1', port }, processes: [xvfb, vnc] }
}

const VNC_PORT_ATTEMPTS = 3
const VNC_START_MS = 15_000

/** x11vnc ended before it listened, saying it could not have its port: taken meanwhile. */
class PortTaken extends SandboxError {
  constructor() {
    super('unavailable', 'the VNC server could not listen')
  }
}

/**
 * x11vnc on `port` of loopback, resolved once it listens: it prints `PORT=<n>` on its
 * standard output then (a connection made to find out would be a client it serves).
 */
function startVnc(display: number, port: number, cwd: string, env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const vnc = spawn(
    'x11vnc',
    [
      '-display',
      `:${display}`,
      '-rfbport',
      String(port),
      '-norc',
      '-localhost',
      '-no6',
      '-nopw',
      '-forever',
      '-shared',
      '-quiet'
    ],
    { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] }
  )
  const listening = new RegExp(`^PORT=${port}$`, 'm')
  return new Promise<ChildProcess>((resolveStart, reject) => {
    let text = ''
    // what it says before it listens, for why it could not (a few lines; a cap all the same)
    let said = ''
    let settled = false
    const settle = (err: SandboxError | null) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      vnc.stdout!.off('data', read)
      vnc.stderr!.off('data', heard)
      // nothing more is read from its output; a full pipe must not stop it
      vnc.stdout!.resume()
      vnc.stderr!.resume()
      if (!err) return resolveStart(vnc)
      stopAll([vnc])
      reject(err)
    }
    const read = (chunk: Buffer) => {
      text += chunk.toString()
      if (listening.test(text)) settle(null)
    }
    const heard = (chunk: Buffer) => {
      if (said.length < 4096) said += chunk.toString()
    }
    const failed = (err: Error) => settle(new SandboxError('unavailable', `x11vnc failed: ${err.message}`))
    const exited = (code: number | null) =>
      settle(
        /could not obtain listening port/.test(said)
          ? new PortTaken()
          : new SandboxError('unavailable', `x11vnc exited (${code})`)
      )
    const timer = setTimeout(
      () => settle(new SandboxError('unavailable', 'the VNC server did not start in time')),
      VNC_START_MS
    )
    vnc.stdout!.on('data', read)
    vnc.stderr!.on('data', heard)
    // kept once it listens: a later error (a failed kill) must not be an unhandled 'error' event
    vnc.on('error', failed)
    // 'close', not 'exit': what it wrote before it ended has been read by then
    vnc.once('close', exited)
  })
}
