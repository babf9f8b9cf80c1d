import { spawn, type ChildProcess } from 'node:child_process'
import { connect, createServer } from 'node:net'
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

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolvePort(port))
    })
  })
}

function waitForPort(port: number, deadline: number, failed: () => string | null): Promise<void> {
  return new Promise((resolveWait, reject) => {
    const attempt = () => {
      const why = failed()
      if (why) return reject(new SandboxError('unavailable', why))
      if (Date.now() > deadline) return reject(new SandboxError('unavailable', 'the VNC server did not start in time'))
      const socket = connect(port, '127.0.0.1')
      socket.once('connect', () => {
        socket.destroy()
        resolveWait()
      })
      socket.once('error', () => {
        socket.destroy()
        setTimeout(attempt, 100)
      })
    }
    attempt()
  })
}

/**
 * Xvfb on a display it picks itself (-displayfd), then x11vnc on a free loopback port.
 * No TCP and no abstract-namespace X socket (`-nolisten local`): a sandbox given the
 * network (SANDBOX_NETWORK) must not reach another thread's display that way; only its
 * own display's socket file is bound into it.
 */
export async function startDesktop(): Promise<DesktopProcesses> {
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
  const port = await freePort()
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
    {
      cwd,
      env,
      stdio: ['ignore', 'ignore', 'ignore']
    }
  )
  let exited: string | null = null
  vnc.once('exit', (code) => {
    exited = `x11vnc exited (${code})`
  })
  vnc.once('error', (err) => {
    exited = `x11vnc failed: ${err.message}`
  })
  try {
    await waitForPort(port, Date.now() + 15_000, () => exited)
  } catch (err) {
    stopAll([vnc, xvfb])
    throw err
  }
  return { display, endpoint: { host: '127.0.0.1', port }, processes: [xvfb, vnc] }
}
