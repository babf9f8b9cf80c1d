import { spawn, type ChildProcess } from 'node:child_process'
import { chown, mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable, Writable } from 'node:stream'
import { bwrapArgs, bwrapViaFd, SANDBOX_PATH, type DisplaySocket, type SandboxUser } from './bubblewrap.js'
import { SandboxError, type DesktopEndpoint } from './sandbox.js'

// A sandbox's desktop: an X display (Xvfb) and a VNC server (x11vnc) listening on a unix
// socket in a private folder of the host, both confined like the thread's commands.

export interface DesktopProcesses {
  /** the display as the thread's commands see it, and its socket on the host */
  display: DisplaySocket
  endpoint: DesktopEndpoint
  processes: ChildProcess[]
  /** the private folder of its sockets, removed when it stops */
  dir: string
}

/** Kills each process and everything it started (each leads its own process group). */
export function stopAll(processes: ChildProcess[]): void {
  for (const p of processes) {
    if (p.exitCode !== null || p.signalCode !== null) continue
    try {
      if (p.pid !== undefined) process.kill(-p.pid, 'SIGKILL')
    } catch {
      p.kill('SIGKILL')
    }
  }
}

/** Stops a desktop's processes and removes its sockets' folder. */
export async function stopDesktop(desktop: DesktopProcesses): Promise<void> {
  stopAll(desktop.processes)
  await rm(desktop.dir, { recursive: true, force: true })
}

/** where the VNC server's socket folder appears in the desktop's sandbox */
const BOX_VNC_DIR = '/run/vnc'
const VNC_SOCKET = 'rfb.sock'

/**
 * Xvfb on a display it picks itself (-displayfd, read through a FIFO in `$1`), then
 * x11vnc on the unix socket `$2`. No TCP and no abstract-namespace X socket
 * (`-nolisten local`); x11vnc listens on no TCP port (`-rfbport 0 -no6 -rfbportv6 -1`).
 * x11vnc takes no remote-control commands (`-noremote`: a client of the display could
 * otherwise turn on its file transfer), runs no external command (`-nocmds`), reads no
 * options file (`-norc`); file transfer (TightVNC and UltraVNC) is off, as it is unless
 * asked for.
 */
const DESKTOP_SCRIPT = `ready="$1/cairn-display-ready"
mkfifo -m 600 "$ready" || exit 1
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp -nolisten local 3>"$ready" </dev/null >/dev/null &
read -r display <"$ready" || exit 1
rm -f "$ready"
echo "DISPLAY=$display"
exec x11vnc -display ":$display" -unixsock "$2" -rfbport 0 -no6 -rfbportv6 -1 -noremote -nocmds -norc -nopw -forever -shared 2>&1`

/**
 * Starts a desktop. Confined (`confined` given), Xvfb and x11vnc run in a bubblewrap
 * sandbox of their own, as the sandbox's user: no network, no workspace, only the part
 * of /etc programs need, their own /proc; the X socket folder and the VNC socket folder
 * are the only host folders they may write, both private to this desktop. The proxy
 * reaches the VNC server through that unix socket, the thread's commands the display
 * through the X socket. Unconfined, they run as plain processes (the operator's choice),
 * with the same options.
 */
export async function startDesktop(confined: { user: SandboxUser | null } | null): Promise<DesktopProcesses> {
  const dir = await mkdtemp(join(tmpdir(), 'cairn-desktop-'))
  try {
    const vncDir = join(dir, 'vnc')
    await mkdir(vncDir, { mode: 0o700 })
    const env = { PATH: SANDBOX_PATH, HOME: '/nonexistent', LANG: 'C.UTF-8' }
    let child: ChildProcess
    let socketOf: (display: number) => string
    if (confined) {
      const x11Dir = join(dir, 'x11')
      await mkdir(x11Dir, { mode: 0o700 })
      if (confined.user) {
        for (const d of [x11Dir, vncDir]) await chown(d, confined.user.uid, confined.user.gid)
      }
      const args = bwrapArgs({
        argv: ['/bin/sh', '-c', DESKTOP_SCRIPT, 'cairn-desktop', '/tmp', `${BOX_VNC_DIR}/${VNC_SOCKET}`],
        workspace: null,
        network: false,
        newSession: true,
        display: null,
        user: confined.user,
        binds: [
          '--bind',
          x11Dir,
          '/tmp/.X11-unix',
          // its parent traversable by the sandbox's user (bwrap would make it 0700, root's)
          '--perms',
          '0755',
          '--dir',
          '/run',
          '--bind',
          vncDir,
          BOX_VNC_DIR,
          '--chdir',
          '/'
        ]
      })
      const viaFd = bwrapViaFd(args, 3)
      child = spawn('bwrap', viaFd.argv, {
        cwd: '/',
        env,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe', 'pipe']
      })
      const argsPipe = child.stdio[3] as Writable
      argsPipe.on('error', () => {})
      argsPipe.end(viaFd.data)
      socketOf = (display) => join(x11Dir, `X${display}`)
    } else {
      child = spawn('/bin/sh', ['-c', DESKTOP_SCRIPT, 'cairn-desktop', dir, join(vncDir, VNC_SOCKET)], {
        cwd: '/',
        env,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe']
      })
      socketOf = (display) => `/tmp/.X11-unix/X${display}`
    }
    // it names its display, then x11vnc says it listens
    const ready = await announced(
      child,
      child.stdout!,
      /^DISPLAY=(\d+)\n[\s\S]*?listening on unix socket/m,
      'the desktop',
      'the desktop'
    )
    const display = Number(ready[1])
    return {
      display: { display, socket: socketOf(display) },
      endpoint: { path: join(vncDir, VNC_SOCKET) },
      processes: [child],
      dir
    }
  } catch (err) {
    await rm(dir, { recursive: true, force: true })
    throw err
  }
}

const START_MS = 15_000

/**
 * Resolves with the first match of `pattern` in what `child` writes on `output`, its sign
 * that it is ready. Rejects, the child killed, when it cannot be started, ends first or
 * says nothing in time.
 */
function announced(
  child: ChildProcess,
  output: Readable,
  pattern: RegExp,
  name: string,
  /** who did not start in time, for the message */
  late: string
): Promise<RegExpExecArray> {
  return new Promise<RegExpExecArray>((resolveStart, reject) => {
    let text = ''
    let settled = false
    const settle = (err: SandboxError | null, match?: RegExpExecArray) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      output.off('data', read)
      // nothing more is read from its output; a full pipe must not stop it
      output.resume()
      if (!err) return resolveStart(match!)
      stopAll([child])
      reject(err)
    }
    const read = (chunk: Buffer) => {
      // what it says before it is ready is a few lines; a cap all the same
      if (text.length < 65_536) text += chunk.toString()
      const match = pattern.exec(text)
      if (match) settle(null, match)
    }
    const timer = setTimeout(() => settle(new SandboxError('unavailable', `${late} did not start in time`)), START_MS)
    output.on('data', read)
    child.stderr?.resume()
    // kept once it is ready: a later error (a failed kill) must not be an unhandled 'error' event
    child.on('error', (err) => settle(new SandboxError('unavailable', `${name} failed: ${err.message}`)))
    // 'close', not 'exit': what it wrote before it ended has been read by then
    child.once('close', (code) => settle(new SandboxError('unavailable', `${name} exited (${code})`)))
  })
}
