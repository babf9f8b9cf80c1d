import { spawnSync } from 'node:child_process'
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync
} from 'node:fs'
import { tmpdir } from 'node:os'
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

/**
 * What the sandbox sees of the host's /etc: only what programs need to run (the dynamic
 * linker's cache, the alternatives' links, certificates, fonts, name-service and locale
 * settings, language runtimes' own settings). Never the accounts and their hashes
 * (shadow, gshadow), the host's keys (ssh), nor tools' credentials (npmrc, pip.conf,
 * wgetrc, gitconfig); passwd, group, hosts and hostname are stand-ins naming only the
 * sandbox's users and itself.
 */
const ETC_ENTRIES = new Set([
  'X11',
  'alternatives',
  'bash.bashrc',
  'ca-certificates',
  'ca-certificates.conf',
  'crypto-policies',
  'debian_version',
  'fonts',
  'gai.conf',
  'host.conf',
  'inputrc',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'locale.alias',
  'localtime',
  'lsb-release',
  'magic',
  'magic.mime',
  'mime.types',
  'networks',
  'nsswitch.conf',
  'os-release',
  'perl',
  'pki',
  'protocols',
  'services',
  'sgml',
  'shells',
  'ssl',
  'terminfo',
  'timezone',
  'xdg',
  'xml'
])
/** language runtimes' settings (python3.11, java-17-openjdk ...) */
const ETC_PREFIXES = /^(python3|java-|gtk-)/

const etcViews = new Map<string, { entries: string[]; standIns: string }>()

/** The stand-in passwd, group, hosts and hostname, written once per process and sandbox user in a private folder. */
function etcStandIns(user: SandboxUser | null): { entries: string[]; standIns: string } {
  const uid = user ? user.uid : (process.geteuid?.() ?? 0)
  const gid = user ? user.gid : (process.getegid?.() ?? 0)
  const key = `${uid}:${gid}`
  const known = etcViews.get(key)
  if (known) return known
  let entries: string[] = []
  try {
    entries = readdirSync('/etc').filter((name) => ETC_ENTRIES.has(name) || ETC_PREFIXES.test(name))
  } catch {
    // no /etc: nothing to show of it
  }
  const standIns = mkdtempSync(join(tmpdir(), 'cairn-etc-'))
  process.once('exit', () => rmSync(standIns, { recursive: true, force: true }))
  const users = [`root:x:0:0:root:/root:/bin/sh`]
  const groups = [`root:x:0:`]
  if (uid !== 0 && uid !== 65534) users.push(`sandbox:x:${uid}:${gid}:sandbox:${BOX_HOME}:/bin/sh`)
  if (gid !== 0 && gid !== 65534) groups.push(`sandbox:x:${gid}:`)
  users.push('nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin')
  groups.push('nogroup:x:65534:')
  const files: Record<string, string> = {
    passwd: `${users.join('\n')}\n`,
    group: `${groups.join('\n')}\n`,
    hosts: '127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n',
    hostname: 'sandbox\n'
  }
  for (const [name, content] of Object.entries(files)) {
    writeFileSync(join(standIns, name), content)
    chmodSync(join(standIns, name), 0o644)
  }
  const view = { entries, standIns }
  etcViews.set(key, view)
  return view
}

/**
 * The host's system directories, read-only, and the part of /etc programs need (see
 * ETC_ENTRIES); merged-/usr symlinks (/bin -> usr/bin) stay symlinks.
 */
function systemBinds(user: SandboxUser | null, network: boolean): string[] {
  const args: string[] = ['--ro-bind', '/usr', '/usr']
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
  const etc = etcStandIns(user)
  // readable by the sandbox's user (bwrap would make it 0700, root's)
  args.push('--perms', '0755', '--dir', '/etc')
  for (const name of etc.entries) {
    // certificates and settings, not the host's private keys (ssl/private)
    if (name === 'ssl') {
      args.push('--perms', '0755', '--dir', '/etc/ssl')
      for (const part of ['certs', 'openssl.cnf']) args.push('--ro-bind-try', `/etc/ssl/${part}`, `/etc/ssl/${part}`)
    } else args.push('--ro-bind-try', `/etc/${name}`, `/etc/${name}`)
  }
  for (const name of ['passwd', 'group', 'hosts', 'hostname'])
    args.push('--ro-bind', join(etc.standIns, name), `/etc/${name}`)
  // the host's name servers only when the sandbox may use the network at all
  if (network) args.push('--ro-bind-try', '/etc/resolv.conf', '/etc/resolv.conf')
  args.push('--symlink', '../proc/self/mounts', '/etc/mtab')
  return args
}

/**
 * bwrap reads its options from a descriptor (`--args FD`), and only the command stays on
 * its command line: that line, which its first process in the sandbox keeps and every
 * sandboxed process can read in /proc/1/cmdline, then names no host path (the
 * workspace's is DATA_DIR's). `args` as bwrapArgs made them; `fd` the descriptor.
 */
export function bwrapViaFd(args: string[], fd: number): { argv: string[]; data: Buffer } {
  const end = args.indexOf('--')
  const options = args.slice(0, end)
  return {
    argv: ['--args', String(fd), ...args.slice(end)],
    data: Buffer.from(options.map((a) => `${a}\0`).join(''), 'utf8')
  }
}

/** Where a display's X socket is on the host, and its number in the sandbox. */
export interface DisplaySocket {
  display: number
  /** the socket file on the host */
  socket: string
}

/**
 * bwrap's arguments to run `argv` in a fresh namespace set: the host's system directories
 * read-only and the part of /etc programs need, its own /proc (its own processes only),
 * /dev and /tmp, the workspace at BOX_HOME, the network only when asked, and the thread's X
 * display socket when it has one.
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
  display: DisplaySocket | null
  user: SandboxUser | null
  /** further bwrap arguments (binds), after the system's, /proc, /dev and /tmp */
  binds?: string[]
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
    ...systemBinds(o.user, o.network),
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
  if (o.display !== null && existsSync(o.display.socket)) {
    // the folder readable by the sandbox's user (bwrap would make it 0700, root's)
    args.push(
      '--perms',
      '0755',
      '--dir',
      '/tmp/.X11-unix',
      '--bind',
      o.display.socket,
      `/tmp/.X11-unix/X${o.display.display}`
    )
  }
  if (o.binds) args.push(...o.binds)
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
