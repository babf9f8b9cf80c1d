import type { IPty } from 'node-pty'

/**
 * One interface for every place tools can run. A provider makes one sandbox per
 * (org, thread); the manager below caches them, hands them out and reaps idle ones.
 * `local` (./local-sandbox.ts) is the built-in provider; a container provider
 * implements the same two interfaces (see README, "Adding a sandbox provider").
 */

export interface SandboxKey {
  orgId: string
  /** the thread: the root run id */
  threadId: string
}

export interface ExecOptions {
  /** wall-clock limit; the whole process tree is killed when it passes */
  timeoutMs?: number
  /** stdout and stderr are each cut to this many bytes (the rest is read and dropped) */
  maxOutputBytes?: number
  /** aborting kills the command (a cancelled run) */
  signal?: AbortSignal
  /** extra environment variables (a run's secrets); the sandbox's own PATH, HOME and LANG win */
  env?: Record<string, string> | undefined
}

export interface ExecResult {
  exitCode: number | null
  /** the signal that ended the command, when one did */
  signal: string | null
  stdout: string
  stderr: string
  timedOut: boolean
  /** true when stdout or stderr was cut */
  truncated: boolean
  /** how many bytes of stdout and stderr together were cut off (0 when nothing was) */
  omittedBytes?: number
  durationMs: number
}

export interface FileEntry {
  name: string
  type: 'file' | 'dir' | 'symlink' | 'other'
  size: number
}

export interface PtyOptions {
  cols: number
  rows: number
}

/** Where a VNC server speaking RFB listens for the proxy: a unix socket (the local provider's) or a TCP endpoint. */
export type DesktopEndpoint = { path: string } | { host: string; port: number }

/** A sandbox error the client may see (bad path, missing file, no desktop ...). */
export class SandboxError extends Error {
  readonly code:
    | 'invalid_path'
    | 'not_found'
    | 'too_large'
    | 'not_a_file'
    | 'not_a_directory'
    | 'unavailable'
    | 'destroyed'
    | 'io_error'
  constructor(code: SandboxError['code'], message: string) {
    super(message)
    this.name = 'SandboxError'
    this.code = code
  }
}

export interface Sandbox {
  readonly key: SandboxKey
  exec(command: string, options?: ExecOptions): Promise<ExecResult>
  readFile(path: string, maxBytes?: number): Promise<{ content: string; size: number; truncated: boolean }>
  /**
   * writes a file (folders made as needed) inside the confinement; over `maxBytes` (the sandbox's file limit by
   * default) is `too_large`
   */
  writeFile(path: string, content: string | Uint8Array, maxBytes?: number): Promise<{ bytes: number }>
  listFiles(path: string): Promise<FileEntry[]>
  /** an interactive shell on a pseudo-terminal, confined like `exec` */
  spawnPty(options: PtyOptions): IPty
  /** starts the display and VNC server on first use; throws SandboxError('unavailable') when it cannot */
  desktop(): Promise<DesktopEndpoint>
  /** stops every process of the sandbox; files stay unless `purge` */
  destroy(options?: { purge?: boolean }): Promise<void>
  /** called once when the sandbox is destroyed (reaped, purged or at shutdown) */
  onDestroy(listener: () => void): () => void
  readonly destroyed: boolean
}

export interface SandboxProvider {
  /** the name `/api/config` shows as `sandbox.provider` */
  readonly name: string
  /** how commands are confined (`bwrap`, `container`, `none` ...), for logs and tests */
  readonly confinement: string
  /** whether `desktop()` can work at all here (a 503 before the WebSocket upgrade otherwise) */
  readonly desktopAvailable: boolean
  /**
   * Where workspaces are on this instance's disk (`<root>/<org>/<thread>`), so they can be
   * saved to and restored from the blob store (./workspaces.ts); a provider without it
   * keeps workspaces where they are.
   */
  readonly workspaceRoot?: string
  create(key: SandboxKey): Promise<Sandbox>
  close?(): Promise<void>
}

interface Entry {
  sandbox: Promise<Sandbox>
  lastUsed: number
  leases: number
}

/**
 * Caches one sandbox per (org, thread). Callers `acquire` it for the time they use it
 * (a terminal, a desktop stream, one tool call); a sandbox with no lease and no use
 * for `idleMs` is destroyed by the reaper (its files stay).
 */
export class SandboxManager {
  readonly provider: SandboxProvider
  private readonly entries = new Map<string, Entry>()
  private readonly idleMs: number
  private readonly timer: NodeJS.Timeout

  constructor(provider: SandboxProvider, options: { idleMs: number }) {
    this.provider = provider
    this.idleMs = options.idleMs
    this.timer = setInterval(() => void this.reapIdle(), Math.max(250, Math.min(options.idleMs / 2, 60_000)))
    this.timer.unref()
  }

  /** The sandbox for (org, thread), with a lease; call `release` when done. */
  async acquire(key: SandboxKey): Promise<{ sandbox: Sandbox; release: () => void }> {
    const id = `${key.orgId}/${key.threadId}`
    let entry = this.entries.get(id)
    if (!entry) {
      const fresh: Entry = { sandbox: this.provider.create(key), lastUsed: Date.now(), leases: 0 }
      entry = fresh
      this.entries.set(id, fresh)
      fresh.sandbox.then(
        (sandbox) => {
          sandbox.onDestroy(() => {
            if (this.entries.get(id) === fresh) this.entries.delete(id)
          })
        },
        () => {
          if (this.entries.get(id) === fresh) this.entries.delete(id)
        }
      )
    }
    const current = entry
    current.leases++
    current.lastUsed = Date.now()
    let sandbox: Sandbox
    try {
      sandbox = await current.sandbox
    } catch (err) {
      current.leases--
      throw err
    }
    let released = false
    return {
      sandbox,
      release: () => {
        if (released) return
        released = true
        current.leases--
        current.lastUsed = Date.now()
      }
    }
  }

  /** Destroys idle sandboxes now (the timer calls this too). */
  async reapIdle(now = Date.now()): Promise<number> {
    let reaped = 0
    for (const [id, entry] of this.entries) {
      if (entry.leases > 0 || now - entry.lastUsed < this.idleMs) continue
      this.entries.delete(id)
      reaped++
      try {
        await (await entry.sandbox).destroy()
      } catch {
        // a sandbox that failed to start has nothing to stop
      }
    }
    return reaped
  }

  async destroy(key: SandboxKey, options: { purge?: boolean } = {}): Promise<void> {
    const id = `${key.orgId}/${key.threadId}`
    const entry = this.entries.get(id)
    this.entries.delete(id)
    if (entry) await (await entry.sandbox).destroy(options)
  }

  get size(): number {
    return this.entries.size
  }

  async close(): Promise<void> {
    clearInterval(this.timer)
    const all = [...this.entries.values()]
    this.entries.clear()
    await Promise.allSettled(all.map(async (entry) => (await entry.sandbox).destroy()))
    await this.provider.close?.()
  }
}
