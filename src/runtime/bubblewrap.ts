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

/**
 * The unprivileged user sandboxed processes become when the service runs as root
 * (SANDBOX_UID, SANDBOX_GID). Null when the service is not root: bubblewrap then runs
 * them in a user namespace as the service user, who has no rights to give away.
 */
export interface SandboxUser {
  uid: number
  gid: number
}

export function sandboxUserFor(ids: SandboxUser, euid = process.geteuid?.() ?? -1): SandboxUser | null {
  return euid === 0 ? { uid: ids.uid, gid: ids.gid } : null
}

export interface BubblewrapProbe {
  ok: boolean
  /** false when the bwrap executable is missing altogether */
  installed: boolean
  /** for logs and test skips: may hold the host's error text */
  reason: string
}

/**
 * What the probe runs inside the sandbox: the user it must not be, and the GNU tools the
 * file tools use (they run inside the confinement: see ./file-ops.ts).
 */
const PROBE_SCRIPT =
  'realpath -m / >/dev/null && find / -maxdepth 0 -printf "" && sort -z </dev/null && head -z -n 1 </dev/null && dd if=/dev/null iflag=nofollow,count_bytes count=1 status=none && [ "$(id -u)" = "$1" ]'

/**
 * Whether bubblewrap can build a sandbox here: it needs unprivileged user namespaces
 * (or root, and then `setpriv` to drop to `user`), which many container runtimes forbid.
 * Checked once per process and sandbox user (an app built again in the same process, as
 * tests and benchmarks do, asks the same host the same question).
 */
export function probeBubblewrap(
  user: SandboxUser | null = sandboxUserFor({ uid: 65534, gid: 65534 })
): BubblewrapProbe {
  const key = user ? `${user.uid}:${user.gid}` : 'self'
  let probe = probes.get(key)
  if (!probe) probes.set(key, (probe = probeOnce(user)))
  return probe
}

const probes = new Map<string, BubblewrapProbe>()

function probeOnce(user: SandboxUser | null): BubblewrapProbe {
  const bwrap = findExecutable('bwrap')
  if (!bwrap) return { ok: false, installed: false, reason: 'bwrap is not installed' }
  const uid = user ? user.uid : (process.geteuid?.() ?? 0)
  const args = bwrapArgs({
    argv: ['/bin/sh', '-c', PROBE_SCRIPT, 'probe', String(uid)],
    workspace: null,
    network: false,
    newSession: true,
    display: null,
    user
  })
  const probe = spawnSync(bwrap, args, { timeout: 5000, encoding: 'utf8', env: { PATH: SANDBOX_PATH }, cwd: '/' })
  if (probe.status === 0) return { ok: true, installed: true, reason: 'bubblewrap works' }
  const why = (probe.stderr || probe.error?.message || `exit ${probe.status}`).trim()
  return {
    ok: false,
    installed: true,
    reason: `bwrap cannot create a sandbox here: ${why} (it needs user namespaces, or root with setpriv; and GNU coreutils and findutils inside)`
  }
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
 *
 * As the service user (not root), bubblewrap runs `argv` in a new user namespace with no
 * capabilities. As root, a user namespace would map the sandbox's user to root outside
 * (owner of every host file), so there is none: bubblewrap keeps only the capabilities
 * `setpriv` needs, and `setpriv` becomes `user` (no supplementary groups, empty
 * capability sets, bounding set included, and no_new_privs) before `argv` runs.
 */
export function bwrapArgs(o: {
  argv: string[]
  workspace: string | null
  network: boolean
  newSession: boolean
  display: number | null
  user: SandboxUser | null
}): string[] {
  const args = o.user
    ? [
        '--unshare-ipc',
        '--unshare-pid',
        '--unshare-uts',
        '--unshare-cgroup-try',
        ...(o.network ? [] : ['--unshare-net'])
      ]
    : ['--unshare-all', ...(o.network ? ['--share-net'] : [])]
  args.push('--die-with-parent')
  // a new session stops TIOCSTI from typing into the caller's terminal; a PTY is the sandbox's own
  if (o.newSession) args.push('--new-session')
  args.push(
    ...systemBinds(),
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--perms',
    '1777',
    '--tmpfs',
    '/tmp',
    '--hostname',
    'sandbox'
  )
  if (o.display !== null) {
    const socket = `/tmp/.X11-unix/X${o.display}`
    // the folder readable by the sandbox's user (bwrap would make it 0700, root's)
    if (existsSync(socket)) args.push('--perms', '0755', '--dir', '/tmp/.X11-unix', '--bind', socket, socket)
  }
  if (o.workspace !== null) args.push('--bind', o.workspace, BOX_HOME, '--chdir', BOX_HOME)
  if (!o.user) return [...args, '--', ...o.argv]
  args.push(
    '--cap-drop',
    'ALL',
    '--cap-add',
    'CAP_SETUID',
    '--cap-add',
    'CAP_SETGID',
    '--cap-add',
    'CAP_SETPCAP',
    '--cap-add',
    'CAP_DAC_READ_SEARCH'
  )
  const drop = [
    'setpriv',
    `--reuid=${o.user.uid}`,
    `--regid=${o.user.gid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
    '--'
  ]
  return [...args, '--', ...drop, ...o.argv]
}
