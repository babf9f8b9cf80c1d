import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chown, lstat, mkdir, readdir, realpath, rm } from 'node:fs/promises'
import { isAbsolute, join, resolve } from 'node:path'
import type { Readable, Writable } from 'node:stream'
import * as pty from 'node-pty'
import {
  BOX_HOME,
  bwrapArgs,
  bwrapViaFd,
  findExecutable,
  probeBubblewrap,
  SANDBOX_PATH,
  sandboxUserFor,
  type BubblewrapProbe,
  type DisplaySocket,
  type SandboxUser
} from './bubblewrap.js'
import { startDesktop, stopDesktop, type DesktopProcesses } from './desktop.js'
import { FILE_OPS_SCRIPT, fileOpError } from './file-ops.js'
import {
  SandboxError,
  type DesktopEndpoint,
  type ExecOptions,
  type ExecResult,
  type FileEntry,
  type PtyOptions,
  type Sandbox,
  type SandboxKey,
  type SandboxProvider
} from './sandbox.js'

export interface LocalSandboxOptions {
  /** workspaces live in `<dataDir>/sandboxes/<org>/<thread>` */
  dataDir: string
  /** SANDBOX_CONFINEMENT: auto (bubblewrap when it works), bwrap (required), none (never; needs `unconfined`) */
  confinement: 'auto' | 'bwrap' | 'none'
  /** SANDBOX_UNCONFINED: the operator allows commands to run as plain processes when bubblewrap cannot confine them */
  unconfined: boolean
  /** whether bubblewrap works here for `user` (tests force an answer; probeBubblewrap otherwise) */
  probe?: (user: SandboxUser | null) => BubblewrapProbe
  /** SANDBOX_UID and SANDBOX_GID: who sandboxed processes are when the service runs as root */
  user?: SandboxUser
  network: boolean
  execTimeoutMs: number
  outputMaxBytes: number
  fileMaxBytes: number
  log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }
}

const SAFE_SEGMENT = /^[A-Za-z0-9_-]{1,64}$/
const MAX_LIST_ENTRIES = 1000
/** a file operation reads or writes at most SANDBOX_FILE_MAX_BYTES: only a FIFO or a stalled disk takes this long */
const FILE_OP_TIMEOUT_MS = 30_000
/** The descriptor on which bubblewrap names the first process of the command's PID namespace. */
const INFO_FD = 3
/** The descriptor from which bubblewrap reads its options (see bwrapViaFd). */
const ARGS_FD = 4
const ENTRY_TYPES: Record<string, FileEntry['type']> = { f: 'file', d: 'dir', l: 'symlink' }

interface RawResult extends Omit<ExecResult, 'stdout' | 'stderr'> {
  stdout: Buffer
  stderr: Buffer
}
/**
 * Thrown by the provider when it may not run commands: bubblewrap cannot confine them
 * and the operator did not allow unconfined ones. The message is safe for clients
 * (it names bubblewrap and the way out, never the host's error text).
 */
export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError'
}

/**
 * `local`: a directory per (org, thread), commands in bubblewrap. Plain processes only
 * when the operator says so (SANDBOX_UNCONFINED=true); otherwise, without a working
 * bubblewrap, the constructor throws SandboxUnavailableError and there is no sandbox.
 */
export class LocalSandboxProvider implements SandboxProvider {
  readonly name = 'local'
  readonly confinement: 'bwrap' | 'none'
  /** the unprivileged user bubblewrap drops to (the service runs as root); null otherwise */
  readonly user: SandboxUser | null
  readonly desktopAvailable: boolean
  readonly options: LocalSandboxOptions
  readonly root: string

  get workspaceRoot(): string {
    return this.root
  }

  constructor(options: LocalSandboxOptions) {
    this.options = options
    this.root = resolve(options.dataDir, 'sandboxes')
    const user = sandboxUserFor(options.user ?? { uid: 65534, gid: 65534 })
    this.user = null
    if (options.confinement === 'none') {
      if (!options.unconfined)
        throw new SandboxUnavailableError(
          'SANDBOX_CONFINEMENT=none runs commands outside bubblewrap; it needs SANDBOX_UNCONFINED=true'
        )
      this.confinement = 'none'
      options.log.warn(
        {},
        "SANDBOX_CONFINEMENT=none: sandbox commands run as plain processes with the service user's rights"
      )
    } else {
      const probe = (options.probe ?? probeBubblewrap)(user)
      if (probe.ok) {
        this.confinement = 'bwrap'
        this.user = user
      } else if (options.confinement === 'bwrap') {
        throw new Error(`SANDBOX_CONFINEMENT=bwrap but ${probe.reason}`)
      } else if (options.unconfined) {
        this.confinement = 'none'
        options.log.warn(
          { reason: probe.reason },
          "SANDBOX WARNING: bubblewrap is unavailable and SANDBOX_UNCONFINED=true; sandbox commands run as PLAIN processes with the service user's rights"
        )
      } else {
        options.log.warn(
          { reason: probe.reason },
          'no sandbox: bubblewrap is unavailable, so tools, terminals and desktops answer 503 sandbox_unavailable (install bubblewrap and allow user namespaces, or set SANDBOX_UNCONFINED=true to run commands unconfined)'
        )
        throw new SandboxUnavailableError(
          probe.installed
            ? 'sandbox commands run only inside bubblewrap, and bubblewrap cannot create a sandbox on this server (it needs user namespaces); the operator may set SANDBOX_UNCONFINED=true to run them unconfined'
            : 'sandbox commands run only inside bubblewrap, and bubblewrap (bwrap) is not installed on this server; the operator may set SANDBOX_UNCONFINED=true to run them unconfined'
        )
      }
    }
    this.desktopAvailable = findExecutable('Xvfb') !== null && findExecutable('x11vnc') !== null
  }

  async create(key: SandboxKey): Promise<Sandbox> {
    if (!SAFE_SEGMENT.test(key.orgId) || !SAFE_SEGMENT.test(key.threadId)) {
      throw new SandboxError('invalid_path', 'sandbox ids must be simple identifiers')
    }
    const workspace = join(this.root, key.orgId, key.threadId)
    await mkdir(workspace, { recursive: true, mode: 0o700 })
    if (this.user) await this.own(workspace, this.user)
    return new LocalSandbox(this, key, await realpath(workspace))
  }

  /**
   * The workspace belongs to the sandbox's user, who can then write in it and nowhere
   * else. A workspace from before that user existed is handed over once with
   * `chown -R -h` (GNU's walk never follows a link); no sandboxed process of the
   * thread runs while its sandbox is being created.
   */
  private async own(workspace: string, user: SandboxUser): Promise<void> {
    const info = await lstat(workspace)
    if (info.uid === user.uid && info.gid === user.gid) return
    if ((await readdir(workspace)).length === 0) {
      await chown(workspace, user.uid, user.gid)
      return
    }
    const done = spawnSync('chown', ['-R', '-h', '--', `${user.uid}:${user.gid}`, workspace], {
      env: { PATH: SANDBOX_PATH },
      encoding: 'utf8'
    })
    if (done.status !== 0)
      this.options.log.warn({ status: done.status }, 'could not hand an existing workspace over to the sandbox user')
  }
}

class LocalSandbox implements Sandbox {
  readonly key: SandboxKey
  destroyed = false
  private readonly provider: LocalSandboxProvider
  private readonly workspace: string
  private readonly children = new Set<ChildProcess>()
  private readonly terminals = new Set<pty.IPty>()
  private readonly listeners = new Set<() => void>()
  private desktopStart: Promise<DesktopProcesses> | null = null
  private display: DisplaySocket | null = null

  constructor(provider: LocalSandboxProvider, key: SandboxKey, workspace: string) {
    this.provider = provider
    this.key = key
    this.workspace = workspace
  }

  private get opts(): LocalSandboxOptions {
    return this.provider.options
  }

  private alive(): void {
    if (this.destroyed) throw new SandboxError('destroyed', 'the sandbox was stopped')
  }

  private env(extra: Record<string, string> = {}, given: Record<string, string> = {}): Record<string, string> {
    // never the service's own environment: it holds database URLs and secrets
    const home = this.provider.confinement === 'bwrap' ? BOX_HOME : this.workspace
    const env: Record<string, string> = { ...given, PATH: SANDBOX_PATH, HOME: home, LANG: 'C.UTF-8', ...extra }
    if (this.display !== null) env.DISPLAY = `:${this.display.display}`
    return env
  }

  /**
   * The command line that runs `argv` confined (bubblewrap: `args` are then bwrap's,
   * given to it on a descriptor, see bwrapViaFd) or as is.
   */
  private command(argv: string[], newSession: boolean): { file: string; args: string[]; cwd: string } {
    if (this.provider.confinement !== 'bwrap') return { file: argv[0]!, args: argv.slice(1), cwd: this.workspace }
    const args = bwrapArgs({
      argv,
      workspace: this.workspace,
      network: this.opts.network,
      newSession,
      display: this.display,
      user: this.provider.user
    })
    // the host working directory is never the workspace: bubblewrap enters it in the sandbox's view
    return { file: 'bwrap', args, cwd: '/' }
  }

  exec(commandLine: string, options: ExecOptions = {}): Promise<ExecResult> {
    if (this.destroyed) return Promise.reject(new SandboxError('destroyed', 'the sandbox was stopped'))
    return this.run(['/bin/sh', '-c', commandLine], {
      timeoutMs: options.timeoutMs ?? this.opts.execTimeoutMs,
      maxBytes: options.maxOutputBytes ?? this.opts.outputMaxBytes,
      signal: options.signal,
      env: options.env
    }).then((r) => ({ ...r, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') }))
  }

  /** Runs `argv` confined, in its own process group (a timeout or abort kills the whole tree). */
  private run(argv: string[], o: RunOptions): Promise<RawResult> {
    const { file, args, cwd } = this.command(argv, true)
    const confined = file === 'bwrap'
    const viaFd = confined ? bwrapViaFd(args, ARGS_FD) : null
    const started = Date.now()
    // aborted before it started: nothing runs. (Killed in bubblewrap's first moments, a
    // command could outlive it: its child may not yet have asked to die with its parent.)
    if (o.signal?.aborted) return Promise.resolve(NOT_STARTED())
    return new Promise((resolvePromise, reject) => {
      let child: ChildProcess
      try {
        child = this.spawnChild(
          viaFd ? ['--info-fd', String(INFO_FD), ...viaFd.argv] : args,
          { file, cwd, confined },
          o
        )
      } catch (err) {
        reject(err)
        return
      }
      if (viaFd) handOver(child.stdio[ARGS_FD] as Writable, viaFd.data)
      this.children.add(child)
      const out = new BoundedBuffer(o.maxBytes)
      const errOut = new BoundedBuffer(o.maxBytes)
      child.stdout!.on('data', (chunk: Buffer) => out.push(chunk))
      child.stderr!.on('data', (chunk: Buffer) => errOut.push(chunk))
      // a command that exits without reading its input is not an error of ours
      if (o.stdin) handOver(child.stdin!, o.stdin)
      const killer = new TreeKiller(child, confined)
      const limits = new Limits(o, () => killer.kill())
      child.on('error', (err) => {
        limits.stopTimer()
        this.children.delete(child)
        reject(err)
      })
      child.on('close', (code, signal) => {
        limits.release()
        this.children.delete(child)
        resolvePromise(rawResult({ code, signal }, killer.sent, { out, errOut }, limits.timedOut, started))
      })
    })
  }

  /** The command's process: its own group (killed whole), never the service's environment, the pipes it uses. */
  private spawnChild(
    args: string[],
    { file, cwd, confined }: { file: string; cwd: string; confined: boolean },
    o: RunOptions
  ): ChildProcess {
    return spawn(file, args, {
      cwd,
      env: this.env({}, o.env),
      detached: true,
      stdio: [o.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe', ...(confined ? ['pipe' as const, 'pipe' as const] : [])]
    })
  }

  /**
   * One file operation of FILE_OPS_SCRIPT, run inside the confinement like a command, so
   * that every path is resolved in the sandbox's view (see ./file-ops.ts). The path is
   * checked by `segments()` first, for clear errors; the script never sees `..`.
   */
  private async fileOp(
    op: 'read' | 'list' | 'write',
    path: string,
    limit: number,
    maxBytes: number,
    stdin?: Buffer
  ): Promise<Buffer> {
    this.alive()
    const parts = segments(path)
    if (parts.length === 0 && op !== 'list') throw new SandboxError('invalid_path', 'a file path is required')
    const root = this.provider.confinement === 'bwrap' ? BOX_HOME : this.workspace
    const target = parts.length === 0 ? '.' : `./${parts.join('/')}`
    const r = await this.run(['/bin/sh', '-c', FILE_OPS_SCRIPT, 'cairn-files', root, op, target, String(limit)], {
      timeoutMs: Math.min(this.opts.execTimeoutMs, FILE_OP_TIMEOUT_MS),
      maxBytes,
      ...(stdin ? { stdin } : {})
    })
    const err = fileOpError(op, parts.join('/'), {
      exitCode: r.exitCode,
      timedOut: r.timedOut,
      stderr: r.stderr.toString('utf8')
    })
    if (err) throw err
    return r.stdout
  }

  async readFile(
    path: string,
    maxBytes = this.opts.fileMaxBytes
  ): Promise<{ content: string; size: number; truncated: boolean }> {
    const out = await this.fileOp('read', path, maxBytes, maxBytes + 32)
    const newline = out.indexOf(0x0a)
    const size = Number(out.subarray(0, newline).toString('latin1'))
    if (newline < 0 || !Number.isSafeInteger(size)) throw new SandboxError('io_error', `could not read ${path}`)
    return {
      content: out.subarray(newline + 1, newline + 1 + maxBytes).toString('utf8'),
      size,
      truncated: size > maxBytes
    }
  }

  async writeFile(
    path: string,
    content: string | Uint8Array,
    maxBytes = this.opts.fileMaxBytes
  ): Promise<{ bytes: number }> {
    this.alive()
    const data =
      typeof content === 'string'
        ? Buffer.from(content, 'utf8')
        : Buffer.from(content.buffer, content.byteOffset, content.byteLength)
    if (data.length > maxBytes) throw new SandboxError('too_large', `content is over ${maxBytes} bytes`)
    await this.fileOp('write', path, 0, 64 * 1024, data)
    return { bytes: data.length }
  }

  async listFiles(path: string): Promise<FileEntry[]> {
    const out = await this.fileOp('list', path, MAX_LIST_ENTRIES, MAX_LIST_ENTRIES * 300)
    const entries: FileEntry[] = []
    for (const record of out.toString('utf8').split('\0')) {
      // name/type/size: a name never holds a slash
      const [name, type, size] = record.split('/')
      if (!name || type === undefined) continue
      entries.push({ name, type: ENTRY_TYPES[type] ?? 'other', size: type === 'f' ? Number(size) : 0 })
    }
    return entries
  }

  spawnPty(options: PtyOptions): pty.IPty {
    this.alive()
    const bash = existsSync('/bin/bash')
    const shell = bash ? '/bin/bash' : '/bin/sh'
    const { cwd, ...command } = this.command([shell, '-i'], false)
    let { file, args } = command
    if (file === 'bwrap') {
      file = findExecutable('bwrap')!
      // a PTY has no descriptor to spare: bash hands bwrap its options on one, then becomes bwrap
      if (bash) {
        // $1 options, then bwrap's command line from `--` on
        const end = args.indexOf('--')
        args = [
          '-c',
          'exec 3< <(printf "%s\\0" "${@:2:$1}") && exec "$0" --args 3 "${@:$(($1 + 2))}"',
          file,
          String(end),
          ...args
        ]
        file = '/bin/bash'
      }
    }
    const term = pty.spawn(file, args, {
      name: 'xterm-256color',
      cols: options.cols,
      rows: options.rows,
      cwd,
      env: this.env({ TERM: 'xterm-256color', PS1: '$ ' })
    })
    this.terminals.add(term)
    term.onExit(() => this.terminals.delete(term))
    return term
  }

  desktop(): Promise<DesktopEndpoint> {
    this.alive()
    if (!this.provider.desktopAvailable) {
      return Promise.reject(
        new SandboxError('unavailable', 'the desktop needs Xvfb and x11vnc, which are not installed')
      )
    }
    if (!this.desktopStart) {
      // confined like the thread's commands, in a sandbox of its own
      this.desktopStart = startDesktop(this.provider.confinement === 'bwrap' ? { user: this.provider.user } : null)
      this.desktopStart.then(
        (d) => {
          this.display = d.display
          if (this.destroyed) void stopDesktop(d)
          for (const p of d.processes) {
            p.once('exit', () => {
              // a crashed display is started again on the next request
              void stopDesktop(d)
              if (this.display === d.display) this.display = null
              this.desktopStart = null
            })
          }
        },
        () => {
          this.desktopStart = null
        }
      )
    }
    return this.desktopStart.then((d) => d.endpoint)
  }

  onDestroy(listener: () => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  async destroy(options: { purge?: boolean } = {}): Promise<void> {
    if (!this.destroyed) {
      this.destroyed = true
      for (const child of this.children) {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL')
        } catch {
          // already gone
        }
      }
      for (const term of this.terminals) term.kill('SIGKILL')
      const desktop = this.desktopStart
      this.desktopStart = null
      if (desktop)
        await desktop.then(
          (d) => stopDesktop(d),
          () => {}
        )
      for (const listener of this.listeners) listener()
      this.listeners.clear()
    }
    if (options.purge) {
      // emptied inside the confinement, so no link planted in it can lead the walk out
      const root = this.provider.confinement === 'bwrap' ? BOX_HOME : this.workspace
      await this.run(['/bin/sh', '-c', FILE_OPS_SCRIPT, 'cairn-files', root, 'purge', '.', '0'], {
        timeoutMs: this.opts.execTimeoutMs,
        maxBytes: 4096
      })
      await rm(this.workspace, { recursive: true, force: true })
    }
  }
}

/** Splits a workspace-relative path; absolute paths, `..`, NUL and `~` are refused. */
export function segments(path: string): string[] {
  if (typeof path !== 'string' || path.length > 4096 || path.includes('\0'))
    throw new SandboxError('invalid_path', 'invalid path')
  if (isAbsolute(path) || path.startsWith('~') || /^[A-Za-z]:/.test(path) || path.startsWith('\\')) {
    throw new SandboxError('invalid_path', 'paths are relative to the workspace')
  }
  const parts = path.split(/[\\/]+/).filter((p) => p !== '' && p !== '.')
  if (parts.includes('..')) throw new SandboxError('invalid_path', 'paths may not contain ..')
  return parts
}

interface RunOptions {
  timeoutMs: number
  maxBytes: number
  signal?: AbortSignal | undefined
  env?: Record<string, string> | undefined
  stdin?: Buffer
}

/** A command that never started (aborted before): killed, with nothing said. */
const NOT_STARTED = (): RawResult => ({
  exitCode: null,
  signal: 'SIGKILL',
  stdout: Buffer.alloc(0),
  stderr: Buffer.alloc(0),
  timedOut: false,
  truncated: false,
  durationMs: 0
})

/** Writes all of `data` to a child's input and closes it; the child may close it first (no error of ours). */
function handOver(pipe: Writable, data: Buffer | string): void {
  pipe.on('error', () => {})
  pipe.end(data)
}

/**
 * Kills a command with everything it started. Confined, the command runs in its own PID
 * namespace, whose first process bubblewrap names on INFO_FD once it exists. Killing that
 * process ends everything in the namespace. Killing bubblewrap alone is not enough: in its
 * first moments its child may not yet have asked to die with it, and would then run
 * (holding our pipes) to its end.
 */
class TreeKiller {
  /** a kill was asked for (a timeout, an abort): the SIGKILL the command ends with is ours */
  sent = false
  private readonly child: ChildProcess
  private readonly confined: boolean
  private namespacePid: number | null = null
  private wanted = false
  private exited = false

  constructor(child: ChildProcess, confined: boolean) {
    this.child = child
    this.confined = confined
    if (confined) this.watchNamespace(child.stdio[INFO_FD] as Readable)
    child.on('exit', () => {
      this.exited = true
    })
  }

  kill(): void {
    this.sent = true
    if (!this.confined || this.namespacePid !== null) {
      this.killNamespace()
      this.killGroup()
      return
    }
    // bubblewrap has not named its namespace yet: it does so right after creating it, or exits
    this.wanted = true
  }

  private killGroup(): void {
    try {
      if (this.child.pid !== undefined) process.kill(-this.child.pid, 'SIGKILL')
    } catch {
      this.child.kill('SIGKILL')
    }
  }

  private killNamespace(): void {
    if (this.namespacePid === null || this.exited) return
    try {
      process.kill(this.namespacePid, 'SIGKILL')
    } catch {
      // already gone
    }
  }

  /** Reads the namespace's first process from bubblewrap's info; a kill asked for meanwhile is done then. */
  private watchNamespace(infoStream: Readable): void {
    let info = ''
    const named = () => {
      if (this.wanted) {
        this.killNamespace()
        this.killGroup()
      }
    }
    infoStream.setEncoding('utf8')
    infoStream.on('data', (chunk: string) => {
      if (this.namespacePid !== null || info.length > 4096) return
      info += chunk
      const pid = /"child-pid":\s*(\d+)\D/.exec(info)
      if (pid) {
        this.namespacePid = Number(pid[1])
        named()
      }
    })
    infoStream.on('error', () => {})
    // no name (bubblewrap failed before creating the namespace): its own group is all there is
    infoStream.on('close', named)
  }
}

/** A command's time limit and its caller's abort: either kills it. */
class Limits {
  timedOut = false
  private readonly timer: NodeJS.Timeout
  private readonly signal: AbortSignal | undefined
  private readonly onAbort: () => void

  constructor(o: { timeoutMs: number; signal?: AbortSignal | undefined }, kill: () => void) {
    this.timer = setTimeout(() => {
      this.timedOut = true
      kill()
    }, o.timeoutMs)
    this.signal = o.signal
    this.onAbort = () => kill()
    o.signal?.addEventListener('abort', this.onAbort, { once: true })
    if (o.signal?.aborted) kill()
  }

  stopTimer(): void {
    clearTimeout(this.timer)
  }

  /** The command ended: neither kills it any more. */
  release(): void {
    this.stopTimer()
    this.signal?.removeEventListener('abort', this.onAbort)
  }
}

/** How a command ended, with its output as far as the limit kept it. */
function rawResult(
  ended: { code: number | null; signal: NodeJS.Signals | null },
  killSent: boolean,
  { out, errOut }: { out: BoundedBuffer; errOut: BoundedBuffer },
  timedOut: boolean,
  started: number
): RawResult {
  // killed through its namespace, the command's SIGKILL comes back as bubblewrap's exit
  // status 137 (128 + 9): it is reported as the kill it was
  const ourKill = killSent && (ended.signal === 'SIGKILL' || ended.code === 128 + 9)
  return {
    exitCode: ourKill ? null : ended.code,
    signal: ourKill ? 'SIGKILL' : ended.signal,
    stdout: out.bytes(),
    stderr: errOut.bytes(),
    timedOut,
    truncated: out.truncated || errOut.truncated,
    omittedBytes: out.omitted + errOut.omitted,
    durationMs: Date.now() - started
  }
}

class BoundedBuffer {
  private readonly chunks: Buffer[] = []
  private size = 0
  truncated = false
  /** the bytes received past the limit (counted, not kept) */
  omitted = 0
  private readonly max: number
  constructor(max: number) {
    this.max = max
  }
  push(chunk: Buffer): void {
    const room = this.max - this.size
    if (room <= 0) {
      this.truncated = true
      this.omitted += chunk.length
      return
    }
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk
    if (part.length < chunk.length) this.truncated = true
    this.omitted += chunk.length - part.length
    this.chunks.push(part)
    this.size += part.length
  }
  bytes(): Buffer {
    return Buffer.concat(this.chunks)
  }
}
