import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import type { Readable } from 'node:stream'
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
  const display = Number((await announced(xvfb, xvfb.stdio[3] as Readable, /^(\d+)\n/, 'Xvfb', 'Xvfb'))[1])
  // x11vnc binds the port it is given, and another socket may have taken it since it was
  // free: then it exits before it listens, and starts again on another
  for (let attempt = 1; ; attempt++) {
    const port = await ports()
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
    // it prints PORT=<n> once it listens (a connection made to find out would be a client it serves)
    const started = await announced(
      vnc,
      vnc.stdout!,
      new RegExp(`^PORT=${port}$`, 'm'),
      'x11vnc',
      'the VNC server',
      (said) => (/could not obtain listening port/.test(said) ? new PortTaken() : null)
    ).catch((err: unknown) => {
      if (attempt < VNC_PORT_ATTEMPTS && err instanceof PortTaken) return null
      stopAll([xvfb])
      throw err
    })
    if (started) return { display, endpoint: { host: '127.0.0.1', port }, processes: [xvfb, vnc] }
  }
}

const VNC_PORT_ATTEMPTS = 3
const START_MS = 15_000

/** x11vnc ended before it listened, saying it could not have its port: taken meanwhile. */
class PortTaken extends SandboxError {
  constructor() {
    super('unavailable', 'the VNC server could not listen')
  }
}

/**
 * Resolves with the first match of `pattern` in what `child` writes on `output`, its sign
 * that it is ready. Rejects, the child killed, when it cannot be started, ends first (`why`
 * may name the reason from what it wrote on its standard error, when that is piped) or says
 * nothing in time.
 */
function announced(
  child: ChildProcess,
  output: Readable,
  pattern: RegExp,
  name: string,
  /** who did not start in time, for the message */
  late: string,
  why: (said: string) => SandboxError | null = () => null
): Promise<RegExpExecArray> {
  return new Promise<RegExpExecArray>((resolveStart, reject) => {
    let text = ''
    // what it says before it is ready (a few lines; a cap all the same)
    let said = ''
    let settled = false
    const settle = (err: SandboxError | null, match?: RegExpExecArray) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      output.off('data', read)
      child.stderr?.off('data', heard)
      // nothing more is read from its output; a full pipe must not stop it
      output.resume()
      child.stderr?.resume()
      if (!err) return resolveStart(match!)
      stopAll([child])
      reject(err)
    }
    const read = (chunk: Buffer) => {
      text += chunk.toString()
      const match = pattern.exec(text)
      if (match) settle(null, match)
    }
    const heard = (chunk: Buffer) => {
      if (said.length < 4096) said += chunk.toString()
    }
    const timer = setTimeout(() => settle(new SandboxError('unavailable', `${late} did not start in time`)), START_MS)
    output.on('data', read)
    child.stderr?.on('data', heard)
    // kept once it is ready: a later error (a failed kill) must not be an unhandled 'error' event
    child.on('error', (err) => settle(new SandboxError('unavailable', `${name} failed: ${err.message}`)))
    // 'close', not 'exit': what it wrote before it ended has been read by then
    child.once('close', (code) => settle(why(said) ?? new SandboxError('unavailable', `${name} exited (${code})`)))
  })
}
