import { spawn, type ChildProcess } from 'node:child_process'
import { constants, existsSync } from 'node:fs'
import { lstat, mkdir, open, readdir, realpath, rm, stat } from 'node:fs/promises'
import { isAbsolute, join, relative, resolve, sep } from 'node:path'
import * as pty from 'node-pty'
import { BOX_HOME, bwrapArgs, findExecutable, probeBubblewrap, SANDBOX_PATH, type BubblewrapProbe } from './bubblewrap.js'
import { startDesktop, stopAll, type DesktopProcesses } from './desktop.js'
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
  /** whether bubblewrap works here (tests force an answer; probeBubblewrap otherwise) */
  probe?: () => BubblewrapProbe
  network: boolean
  execTimeoutMs: number
  outputMaxBytes: number
  fileMaxBytes: number
  log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }
}

const SAFE_SEGMENT = /^[A-Za-z0-9_-]{1,64}$/
const MAX_LIST_ENTRIES = 1000
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
  readonly desktopAvailable: boolean
  readonly options: LocalSandboxOptions
  readonly root: string

  constructor(options: LocalSandboxOptions) {
    this.options = options
    this.root = resolve(options.dataDir, 'sandboxes')
    if (options.confinement === 'none') {
      if (!options.unconfined) throw new SandboxUnavailableError('SANDBOX_CONFINEMENT=none runs commands outside bubblewrap; it needs SANDBOX_UNCONFINED=true')
      this.confinement = 'none'
      options.log.warn({}, 'SANDBOX_CONFINEMENT=none: sandbox commands run as plain processes with the service user\'s rights')
    } else {
      const probe = (options.probe ?? probeBubblewrap)()
      if (probe.ok) {
        this.confinement = 'bwrap'
      } else if (options.confinement === 'bwrap') {
        throw new Error(`SANDBOX_CONFINEMENT=bwrap but ${probe.reason}`)
      } else if (options.unconfined) {
        this.confinement = 'none'
        options.log.warn({ reason: probe.reason },
          'SANDBOX WARNING: bubblewrap is unavailable and SANDBOX_UNCONFINED=true; sandbox commands run as PLAIN processes with the service user\'s rights')
      } else {
        options.log.warn({ reason: probe.reason },
          'no sandbox: bubblewrap is unavailable, so tools, terminals and desktops answer 503 sandbox_unavailable (install bubblewrap and allow user namespaces, or set SANDBOX_UNCONFINED=true to run commands unconfined)')
        throw new SandboxUnavailableError(probe.installed
          ? 'sandbox commands run only inside bubblewrap, and bubblewrap cannot create a sandbox on this server (it needs user namespaces); the operator may set SANDBOX_UNCONFINED=true to run them unconfined'
          : 'sandbox commands run only inside bubblewrap, and bubblewrap (bwrap) is not installed on this server; the operator may set SANDBOX_UNCONFINED=true to run them unconfined')
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
    return new LocalSandbox(this, key, await realpath(workspace))
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
  private display: number | null = null

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
    if (this.display !== null) env.DISPLAY = `:${this.display}`
    return env
  }

  /** The command line that runs `argv` confined (bubblewrap) or as is. */
  private command(argv: string[], newSession: boolean): { file: string; args: string[]; cwd: string } {
    if (this.provider.confinement !== 'bwrap') return { file: argv[0]!, args: argv.slice(1), cwd: this.workspace }
    const args = bwrapArgs({ argv, workspace: this.workspace, network: this.opts.network, newSession, display: this.display })
    return { file: 'bwrap', args, cwd: this.workspace }
  }

  exec(commandLine: string, options: ExecOptions = {}): Promise<ExecResult> {
    if (this.destroyed) return Promise.reject(new SandboxError('destroyed', 'the sandbox was stopped'))
    const timeoutMs = options.timeoutMs ?? this.opts.execTimeoutMs
    const maxBytes = options.maxOutputBytes ?? this.opts.outputMaxBytes
    const { file, args, cwd } = this.command(['/bin/sh', '-c', commandLine], true)
    const started = Date.now()
    return new Promise((resolvePromise, reject) => {
      let child: ChildProcess
      try {
        // detached: its own process group, so a timeout kills the whole tree
        child = spawn(file, args, { cwd, env: this.env({}, options.env), detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
      } catch (err) {
        reject(err)
        return
      }
      this.children.add(child)
      const out = new BoundedBuffer(maxBytes)
      const errOut = new BoundedBuffer(maxBytes)
      child.stdout!.on('data', (chunk: Buffer) => out.push(chunk))
      child.stderr!.on('data', (chunk: Buffer) => errOut.push(chunk))
      let timedOut = false
      const kill = () => {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL')
        } catch {
          child.kill('SIGKILL')
        }
      }
      const timer = setTimeout(() => {
        timedOut = true
        kill()
      }, timeoutMs)
      const onAbort = () => kill()
      options.signal?.addEventListener('abort', onAbort, { once: true })
      if (options.signal?.aborted) kill()
      child.on('error', (err) => {
        clearTimeout(timer)
        this.children.delete(child)
        reject(err)
      })
      child.on('close', (code, signal) => {
        clearTimeout(timer)
        options.signal?.removeEventListener('abort', onAbort)
        this.children.delete(child)
        resolvePromise({
          exitCode: code,
          signal,
          stdout: out.text(),
          stderr: errOut.text(),
          timedOut,
          truncated: out.truncated || errOut.truncated,
          durationMs: Date.now() - started
        })
      })
    })
  }

  async readFile(path: string, maxBytes = this.opts.fileMaxBytes): Promise<{ content: string; size: number; truncated: boolean }> {
    this.alive()
    const target = await this.resolveExisting(path)
    const info = await stat(target)
    if (!info.isFile()) throw new SandboxError('not_a_file', `${path} is not a file`)
    const handle = await open(target, constants.O_RDONLY | constants.O_NOFOLLOW)
    try {
      const length = Math.min(info.size, maxBytes)
      const buffer = Buffer.alloc(length)
      const { bytesRead } = await handle.read(buffer, 0, length, 0)
      return { content: buffer.subarray(0, bytesRead).toString('utf8'), size: info.size, truncated: info.size > maxBytes }
    } finally {
      await handle.close()
    }
  }

  async writeFile(path: string, content: string): Promise<{ bytes: number }> {
    this.alive()
    const data = Buffer.from(content, 'utf8')
    if (data.length > this.opts.fileMaxBytes) throw new SandboxError('too_large', `content is over ${this.opts.fileMaxBytes} bytes`)
    const parts = segments(path)
    if (parts.length === 0) throw new SandboxError('invalid_path', 'a file path is required')
    const dir = await this.walk(parts.slice(0, -1), true)
    let target = join(dir, parts[parts.length - 1]!)
    const existing = await lstat(target).catch(() => null)
    if (existing?.isSymbolicLink()) target = await this.confine(target)
    if (existing?.isDirectory()) throw new SandboxError('not_a_file', `${path} is a directory`)
    // O_NOFOLLOW: a symlink planted after the check is refused, not followed
    const handle = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o644)
    try {
      await handle.writeFile(data)
    } finally {
      await handle.close()
    }
    return { bytes: data.length }
  }

  async listFiles(path: string): Promise<FileEntry[]> {
    this.alive()
    const dir = await this.resolveExisting(path, true)
    const info = await stat(dir)
    if (!info.isDirectory()) throw new SandboxError('not_a_directory', `${path} is not a directory`)
    const names = (await readdir(dir)).sort().slice(0, MAX_LIST_ENTRIES)
    const entries: FileEntry[] = []
    for (const name of names) {
      const entry = await lstat(join(dir, name)).catch(() => null)
      if (!entry) continue
      const type = entry.isSymbolicLink() ? 'symlink' : entry.isDirectory() ? 'dir' : entry.isFile() ? 'file' : 'other'
      entries.push({ name, type, size: entry.isFile() ? entry.size : 0 })
    }
    return entries
  }

  spawnPty(options: PtyOptions): pty.IPty {
    this.alive()
    const shell = existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh'
    const { file, args, cwd } = this.command([shell, '-i'], false)
    const term = pty.spawn(file === 'bwrap' ? findExecutable('bwrap')! : file, args, {
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
      return Promise.reject(new SandboxError('unavailable', 'the desktop needs Xvfb and x11vnc, which are not installed'))
    }
    if (!this.desktopStart) {
      this.desktopStart = startDesktop(this.workspace)
      this.desktopStart.then((d) => {
        this.display = d.display
        if (this.destroyed) stopAll(d.processes)
        for (const p of d.processes) {
          p.once('exit', () => {
            // a crashed display is started again on the next request
            stopAll(d.processes)
            if (this.display === d.display) this.display = null
            this.desktopStart = null
          })
        }
      }, () => {
        this.desktopStart = null
      })
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
      if (desktop) await desktop.then((d) => stopAll(d.processes), () => {})
      for (const listener of this.listeners) listener()
      this.listeners.clear()
    }
    if (options.purge) await rm(this.workspace, { recursive: true, force: true })
  }

  /** The host path of an existing file or directory, checked to be inside the workspace. */
  private async resolveExisting(path: string, allowRoot = false): Promise<string> {
    const parts = segments(path)
    if (parts.length === 0 && !allowRoot) throw new SandboxError('invalid_path', 'a file path is required')
    return this.walk(parts, false)
  }

  /** Follows `parts` from the workspace, refusing any step (symlinks included) that leaves it. */
  private async walk(parts: string[], createDirs: boolean): Promise<string> {
    let current = this.workspace
    for (const part of parts) {
      const next = join(current, part)
      const info = await lstat(next).catch(() => null)
      if (!info) {
        if (!createDirs) throw new SandboxError('not_found', `${parts.join('/')} does not exist`)
        await mkdir(next, { mode: 0o755 })
        current = next
        continue
      }
      current = info.isSymbolicLink() ? await this.confine(next) : next
      if (createDirs && !(await stat(current)).isDirectory()) throw new SandboxError('not_a_directory', `${part} is not a directory`)
    }
    return current
  }

  private async confine(path: string): Promise<string> {
    const real = await realpath(path).catch(() => null)
    if (real === null) throw new SandboxError('not_found', 'the link points nowhere')
    const rel = relative(this.workspace, real)
    if (rel === '' || (!isAbsolute(rel) && rel !== '..' && !rel.startsWith(`..${sep}`))) return real
    throw new SandboxError('invalid_path', 'the path leaves the workspace')
  }
}

/** Splits a workspace-relative path; absolute paths, `..`, NUL and `~` are refused. */
export function segments(path: string): string[] {
  if (typeof path !== 'string' || path.length > 4096 || path.includes('\0')) throw new SandboxError('invalid_path', 'invalid path')
  if (isAbsolute(path) || path.startsWith('~') || /^[A-Za-z]:/.test(path) || path.startsWith('\\')) {
    throw new SandboxError('invalid_path', 'paths are relative to the workspace')
  }
  const parts = path.split(/[\\/]+/).filter((p) => p !== '' && p !== '.')
  if (parts.includes('..')) throw new SandboxError('invalid_path', 'paths may not contain ..')
  return parts
}

class BoundedBuffer {
  private readonly chunks: Buffer[] = []
  private size = 0
  truncated = false
  private readonly max: number
  constructor(max: number) {
    this.max = max
  }
  push(chunk: Buffer): void {
    const room = this.max - this.size
    if (room <= 0) {
      this.truncated = true
      return
    }
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk
    if (part.length < chunk.length) this.truncated = true
    this.chunks.push(part)
    this.size += part.length
  }
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8')
  }
}
