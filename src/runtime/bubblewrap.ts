import { spawnSync } from 'node:child_process'
import { existsSync, lstatSync, readlinkSync } from 'node:fs'
import { delimiter, join } from 'node:path'

// Bubblewrap: whether it can confine commands here, and the argv that confines one.

/** The PATH sandboxed commands get (never the service's own environment). */
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
/** where the workspace appears inside bubblewrap */
export const BOX_HOME = '/workspace'

export function findExecutable(name: string): string | null {
  for (const dir of (process.env.PATH ?? SANDBOX_PATH).split(delimiter)) {
    const candidate = join(dir, name)
    if (dir && existsSync(candidate)) return candidate
  }
  return null
}

export interface BubblewrapProbe {
  ok: boolean
  /** false when the bwrap executable is missing altogether */
  installed: boolean
  /** for logs and test skips: may hold the host's error text */
  reason: string
}

/**
 * Whether bubblewrap can build a sandbox here: it needs unprivileged user namespaces
 * (or root), which many container runtimes forbid. Checked once at boot.
 */
export function probeBubblewrap(): BubblewrapProbe {
  const bwrap = findExecutable('bwrap')
  if (!bwrap) return { ok: false, installed: false, reason: 'bwrap is not installed' }
  const probe = spawnSync(bwrap, ['--unshare-all', '--die-with-parent', '--new-session', ...systemBinds(), '--proc', '/proc', '--dev', '/dev', '--', '/bin/sh', '-c', 'exit 0'], {
    timeout: 5000,
    encoding: 'utf8',
    env: { PATH: SANDBOX_PATH }
  })
  if (probe.status === 0) return { ok: true, installed: true, reason: 'bubblewrap works' }
  return { ok: false, installed: true, reason: `bwrap cannot create a sandbox here: ${(probe.stderr || probe.error?.message || `exit ${probe.status}`).trim()}` }
}

/** The host's system directories, read-only; merged-/usr symlinks (/bin -> usr/bin) stay symlinks. */
function systemBinds(): string[] {
  const args: string[] = ['--ro-bind', '/usr', '/usr', '--ro-bind', '/etc', '/etc']
  for (const dir of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let info
    try {
      info = lstatSync(dir)
    } catch {
      continue
    }
    if (info.isSymbolicLink()) args.push('--symlink', readlinkSync(dir), dir)
    else if (info.isDirectory()) args.push('--ro-bind', dir, dir)
  }
  return args
}

/**
 * bwrap's arguments to run `argv` in a fresh namespace set: the host's system directories
 * read-only, its own /proc, /dev and /tmp, the workspace at BOX_HOME, the network only
 * when asked, and the thread's X display socket when it has one.
 */
export function bwrapArgs(o: { argv: string[]; workspace: string; network: boolean; newSession: boolean; display: number | null }): string[] {
  const args = ['--unshare-all']
  if (o.network) args.push('--share-net')
  args.push('--die-with-parent')
  // a new session stops TIOCSTI from typing into the caller's terminal; a PTY is the sandbox's own
  if (o.newSession) args.push('--new-session')
  args.push(...systemBinds(), '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--hostname', 'sandbox')
  if (o.display !== null) {
    const socket = `/tmp/.X11-unix/X${o.display}`
    if (existsSync(socket)) args.push('--bind', socket, socket)
  }
  args.push('--bind', o.workspace, BOX_HOME, '--chdir', BOX_HOME, '--', ...o.argv)
  return args
}
