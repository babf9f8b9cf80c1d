import { createHash, randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import { lstat, mkdir, readdir, readFile, readlink, rm, rmdir, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { Readable } from 'node:stream'
import { sql } from 'drizzle-orm'
import * as tar from 'tar'
import { rowsOf, type Database, type Db } from '../db/client.js'
import type { WorkspaceArchives, RunDirectory } from './ports.js'
import type { SandboxKey, SandboxManager } from './sandbox.js'
import { createWorkerLoop, type WorkerLoop } from '../worker-loop.js'

/** Another instance holds the thread's workspace (a run or a terminal there). */
export class WorkspaceBusy extends Error {
  override name = 'WorkspaceBusy'
}

/**
 * What closing a session did with the workspace; `error` is a sentence for the run or terminal, null when all is kept.
 */
export interface SaveOutcome {
  saved: boolean
  /** `workspace_too_large: …` or `workspace_not_saved: …` */
  error: string | null
}

export interface WorkspaceSession {
  readonly key: SandboxKey
  /** Ends the session; the last one here saves the workspace if it changed and frees it. Once. */
  close(): Promise<SaveOutcome>
}

export interface ThreadWorkspacesOptions {
  db: Db
  archives: WorkspaceArchives
  sandboxes: SandboxManager
  /** where the provider keeps workspaces on this instance's disk: `<root>/<org>/<thread>` */
  root: string
  /** where this instance keeps what it knows of its copies (beside the workspaces, never inside one) */
  stateDir: string
  /**
   * who holds leases: fixed for a data directory only one process may open (the embedded database), else one per
   * process
   */
  instanceId?: string | undefined
  leaseMs: number
  maxBytes: number
  /** which threads still exist (the sweeper drops the others) */
  runs: Pick<RunDirectory, 'existingThreads'>
  /** hears the frees of every instance (the database's LISTEN), so a waiting run goes on at once */
  listen?: Database['listen'] | undefined
  log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void }
}

interface Held {
  key: SandboxKey
  sessions: number
  /** the revision this copy started from and the fingerprint of its files then (what counts as unchanged) */
  revision: number
  fingerprint: string
  /** the lease was taken from us (not renewed in time): nothing more is saved from this copy */
  lost: boolean
}

/** This instance's copy is exactly a saved revision (written only when no session uses it). */
interface Marker {
  revision: number
  fingerprint: string
}

/** Entry types a workspace archive keeps; devices, FIFOs and hard links to outside are never restored. */
const KEPT_TYPES = new Set(['File', 'OldFile', 'ContiguousFile', 'Directory', 'SymbolicLink'])
/**
 * tar writes a second name of a hard-linked file as a link to the first; given this cache,
 * every name is written as a file of its own (a restored link could otherwise name a path
 * the archive does not hold).
 */
const NO_HARD_LINKS = {
  get: () => undefined,
  set() {
    return this
  },
  has: () => false
} as unknown as Map<`${number}:${number}`, string>
/**
 * A waiting run asks again when the holder frees the workspace (every free is announced on
 * this channel), and at the latest this often: a killed holder's lease just expires, unannounced.
 */
const FREED_CHANNEL = 'cairn_workspace_freed'
const WAIT_RECHECK_MS = 1000
/** Room for tar headers and compression overhead over the files' own bytes. */
const ARCHIVE_SLACK_BYTES = 1024 * 1024

/**
 * A thread's workspace follows the thread across instances. Sessions (a run's tool calls,
 * a terminal, a desktop) open it here: the first takes the thread's lease in
 * `thread_workspaces` (held by this instance, renewed while any session is open) and
 * restores the last saved archive from the blob store unless this disk already holds that
 * revision. The last session's end saves the workspace if its files changed (a tar.gz
 * blob, bounded by `maxBytes`) and frees the lease. An instance that dies keeps its lease until it expires; the
 * next holder gets what was last saved.
 */
export class ThreadWorkspaces {
  readonly instanceId: string
  private readonly o: ThreadWorkspacesOptions
  private readonly held = new Map<string, Held>()
  /** one take, save or release of a thread at a time on this instance */
  private readonly locks = new Map<string, Promise<unknown>>()
  private loop: WorkerLoop<never> | null = null
  private closed = false
  /** runs of this instance waiting for a workspace another instance holds, by thread */
  private readonly waiting = new Map<string, Set<() => void>>()
  private unlisten: (() => Promise<void>) | null = null

  constructor(options: ThreadWorkspacesOptions) {
    this.o = options
    this.instanceId = options.instanceId ?? randomUUID()
  }

  start(sweepMs: number): void {
    this.loop = createWorkerLoop<never>({
      name: 'thread workspaces',
      log: this.o.log,
      pollMs: sweepMs,
      every: [
        { everyMs: Math.max(50, Math.floor(this.o.leaseMs / 3)), job: () => this.renew() },
        {
          everyMs: sweepMs,
          job: () => this.sweep().catch((err: unknown) => this.o.log.warn({ err }, 'workspace sweep failed'))
        }
      ]
    })
    this.loop.start()
    this.o
      .listen?.(FREED_CHANNEL, (id) => {
        for (const wake of this.waiting.get(id) ?? []) wake()
      })
      .then((unlisten) => {
        if (this.closed) void unlisten().catch(() => {})
        else this.unlisten = unlisten
      })
      .catch((err: unknown) =>
        this.o.log.warn({ err }, 'listening for freed workspaces failed; waiting runs ask again every second')
      )
  }

  /** How many threads this instance holds now. */
  get size(): number {
    return this.held.size
  }

  /**
   * Opens a session on the thread's workspace. Held by another instance: `wait` (a run)
   * asks again until it is free (or `signal` aborts); otherwise throws WorkspaceBusy (a
   * terminal). `onWait` is called once when the session has to wait.
   */
  async open(
    key: SandboxKey,
    options: { wait: boolean; signal?: AbortSignal | undefined; onWait?: (() => void) | undefined }
  ): Promise<WorkspaceSession> {
    let waited = false
    for (;;) {
      if (this.closed) throw new WorkspaceBusy('the instance is stopping')
      try {
        await this.locked(key, () => this.join(key))
        break
      } catch (err) {
        if (!(err instanceof WorkspaceBusy) || !options.wait) throw err
        if (!waited) {
          waited = true
          options.onWait?.()
        }
        await this.untilFreed(key, options.signal)
      }
    }
    let closing: Promise<SaveOutcome> | null = null
    return {
      key,
      close: () => (closing ??= this.locked(key, () => this.leave(key)))
    }
  }

  /** Until the thread's workspace is announced free, WAIT_RECHECK_MS at most; rejects when `signal` aborts. */
  private untilFreed(key: SandboxKey, signal: AbortSignal | undefined): Promise<void> {
    const id = this.id(key)
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason)
        return
      }
      const waiters = this.waiting.get(id) ?? new Set()
      this.waiting.set(id, waiters)
      const done = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        waiters.delete(wake)
        if (waiters.size === 0 && this.waiting.get(id) === waiters) this.waiting.delete(id)
      }
      const wake = () => {
        done()
        resolve()
      }
      const onAbort = () => {
        done()
        reject(signal!.reason)
      }
      const timer = setTimeout(wake, WAIT_RECHECK_MS)
      waiters.add(wake)
      signal?.addEventListener('abort', onAbort, { once: true })
    })
  }

  private pathOf(key: SandboxKey): string {
    return join(this.o.root, key.orgId, key.threadId)
  }

  private id(key: SandboxKey): string {
    return `${key.orgId}/${key.threadId}`
  }

  private async locked<T>(key: SandboxKey, work: () => Promise<T>): Promise<T> {
    const id = this.id(key)
    const before = this.locks.get(id) ?? Promise.resolve()
    const mine = before.then(work, work)
    const tail = mine.catch(() => {})
    this.locks.set(id, tail)
    void tail.then(() => {
      if (this.locks.get(id) === tail) this.locks.delete(id)
    })
    return mine
  }

  /**
   * A session more here: the first takes the lease (and restores the workspace when this disk does not have its
   * revision).
   */
  private async join(key: SandboxKey): Promise<void> {
    const current = this.held.get(this.id(key))
    if (current && !current.lost) {
      current.sessions++
      return
    }
    const rows = rowsOf<{ revision: number; sha256: string | null }>(
      await this.o.db.execute(sql`
      insert into thread_workspaces (org_id, thread_id, holder, lease_expires_at)
      values (${key.orgId}, ${key.threadId}, ${this.instanceId}, now() + make_interval(secs => ${this.o.leaseMs / 1000}))
      on conflict (org_id, thread_id) do update set holder = excluded.holder, lease_expires_at = excluded.lease_expires_at
      where thread_workspaces.holder is null or thread_workspaces.holder = excluded.holder or thread_workspaces.lease_expires_at < now()
      returning revision, sha256`)
    )
    const row = rows[0]
    if (!row) throw new WorkspaceBusy("the thread's workspace is in use on another instance")
    const revision = Number(row.revision)
    // nothing of the thread runs here while this instance did not hold it; make sure
    await this.o.sandboxes.destroy(key)
    const marker = await this.readMarker(key)
    // from here on the copy may change: after a crash it must not pass for a saved revision
    await this.removeMarker(key)
    let fingerprint: string
    try {
      if (marker && marker.revision === revision) fingerprint = marker.fingerprint
      else if (revision === 0) fingerprint = (await this.walk(this.pathOf(key))).fingerprint
      else fingerprint = await this.restore(key, row.sha256)
    } catch (err) {
      await this.release(key)
      throw err
    }
    this.held.set(this.id(key), { key, sessions: (current?.sessions ?? 0) + 1, revision, fingerprint, lost: false })
  }

  /** Replaces this disk's copy with the saved archive; returns the fingerprint of what it restored. */
  private async restore(key: SandboxKey, sha256: string | null): Promise<string> {
    const dir = this.pathOf(key)
    await rm(dir, { recursive: true, force: true })
    await mkdir(dir, { recursive: true, mode: 0o700 })
    if (sha256) {
      const body = await this.o.archives.read(key.orgId, sha256)
      await new Promise<void>((resolve, reject) => {
        const unpack = tar.x({
          cwd: dir,
          preservePaths: false,
          preserveOwner: false,
          filter: (_path, entry) => KEPT_TYPES.has((entry as { type: string }).type)
        })
        unpack.on('error', reject)
        body.on('error', reject)
        unpack.on('close', () => resolve())
        body.pipe(unpack)
      })
    }
    return (await this.walk(dir)).fingerprint
  }

  /**
   * A session less. The last one here saves what changed and frees the lease; before it
   * reads the files, every process of the thread's sandbox is stopped (a desktop too), so
   * nothing confined can swap a folder for a link while the service walks and archives it.
   */
  private async leave(key: SandboxKey): Promise<SaveOutcome> {
    const held = this.held.get(this.id(key))
    if (!held) return { saved: false, error: null }
    held.sessions--
    if (held.sessions > 0) return { saved: false, error: null }
    this.held.delete(this.id(key))
    await this.o.sandboxes.destroy(key)
    const outcome = await this.save(held)
    if (held.lost) return outcome
    // this disk now holds exactly that revision, unless a save was refused (then the next holder, here too, restores)
    if (outcome.error === null) await this.writeMarker(key, { revision: held.revision, fingerprint: held.fingerprint })
    await this.release(key)
    return outcome
  }

  private async save(held: Held): Promise<SaveOutcome> {
    const { key } = held
    if (held.lost)
      return { saved: false, error: "workspace_not_saved: the thread's workspace was taken over by another instance" }
    const dir = this.pathOf(key)
    let walked: { fingerprint: string; bytes: number }
    try {
      walked = await this.walk(dir)
      if (walked.fingerprint === held.fingerprint) return { saved: false, error: null }
      if (walked.bytes > this.o.maxBytes) {
        return {
          saved: false,
          error: `workspace_too_large: the thread's workspace holds ${walked.bytes} bytes, over the limit of ${this.o.maxBytes} (SANDBOX_WORKSPACE_MAX_BYTES); its changes were not saved`
        }
      }
      const pack = tar.c(
        {
          cwd: dir,
          gzip: true,
          portable: true,
          follow: false,
          linkCache: NO_HARD_LINKS,
          filter: (_path, stat) => {
            const s = stat as Stats
            return s.isFile() || s.isDirectory() || s.isSymbolicLink()
          }
        },
        ['.']
      )
      const blob = await this.o.archives.put(
        key.orgId,
        Readable.from(pack as AsyncIterable<Buffer>),
        this.o.maxBytes + ARCHIVE_SLACK_BYTES
      )
      const revision = await this.o.db.transaction(async (tx) => {
        await this.o.archives.reference(tx, key.orgId, blob.sha256)
        const rows = rowsOf<{ revision: number }>(
          await tx.execute(sql`
          update thread_workspaces set revision = revision + 1, sha256 = ${blob.sha256}, bytes = ${blob.size}, saved_at = now()
          where org_id = ${key.orgId} and thread_id = ${key.threadId} and holder = ${this.instanceId}
          returning revision`)
        )
        return rows[0] ? Number(rows[0].revision) : null
      })
      if (revision === null) {
        held.lost = true
        return { saved: false, error: "workspace_not_saved: the thread's workspace was taken over by another instance" }
      }
      held.revision = revision
      held.fingerprint = walked.fingerprint
      return { saved: true, error: null }
    } catch (err) {
      this.o.log.warn({ err, orgId: key.orgId, threadId: key.threadId }, 'saving a thread workspace failed')
      return { saved: false, error: "workspace_not_saved: the thread's workspace could not be saved to the blob store" }
    }
  }

  private async release(key: SandboxKey): Promise<void> {
    await this.o.db.execute(sql`
      with freed as (
        update thread_workspaces set holder = null, lease_expires_at = null
        where org_id = ${key.orgId} and thread_id = ${key.threadId} and holder = ${this.instanceId}
        returning 1)
      select pg_notify(${FREED_CHANNEL}, ${this.id(key)}) from freed`)
  }

  /** Keeps this instance's leases; a lease that could not be kept (taken after it expired) is marked lost. */
  private async renew(): Promise<void> {
    if (this.held.size === 0 || this.closed) return
    try {
      const rows = rowsOf<{ org_id: string; thread_id: string }>(
        await this.o.db.execute(sql`
        update thread_workspaces set lease_expires_at = now() + make_interval(secs => ${this.o.leaseMs / 1000})
        where holder = ${this.instanceId}
        returning org_id, thread_id`)
      )
      const kept = new Set(rows.map((r) => `${r.org_id}/${r.thread_id}`))
      for (const [id, held] of this.held) {
        if (!kept.has(id) && !held.lost) {
          held.lost = true
          this.o.log.warn(
            { orgId: held.key.orgId, threadId: held.key.threadId },
            'the lease of a thread workspace was lost; its changes here will not be saved'
          )
        }
      }
    } catch (err) {
      this.o.log.warn({ err }, 'renewing workspace leases failed')
    }
  }

  /**
   * Files of the workspace, walked without following links: a fingerprint of names,
   * types, sizes, modes, modification times and link targets (equal: nothing changed),
   * and the bytes of its regular files.
   */
  async walk(dir: string): Promise<{ fingerprint: string; bytes: number }> {
    const hash = createHash('sha256')
    let bytes = 0
    const visit = async (path: string, rel: string): Promise<void> => {
      let names: string[]
      try {
        names = (await readdir(path)).sort()
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return
        throw err
      }
      for (const name of names) {
        const full = join(path, name)
        const info = await lstat(full, { bigint: true }).catch(() => null)
        if (!info) continue
        const type = info.isFile() ? 'f' : info.isDirectory() ? 'd' : info.isSymbolicLink() ? 'l' : 'o'
        const target = type === 'l' ? await readlink(full).catch(() => '') : ''
        hash.update(`${rel}${name}\0${type}\0${info.size}\0${info.mode}\0${info.mtimeNs}\0${target}\n`)
        if (type === 'f') bytes += Number(info.size)
        if (type === 'd') await visit(full, `${rel}${name}/`)
      }
    }
    await visit(dir, '')
    return { fingerprint: hash.digest('hex'), bytes }
  }

  private markerPath(key: SandboxKey): string {
    return join(this.o.stateDir, key.orgId, `${key.threadId}.json`)
  }

  private async readMarker(key: SandboxKey): Promise<Marker | null> {
    try {
      const value = JSON.parse(await readFile(this.markerPath(key), 'utf8')) as Marker
      return typeof value.revision === 'number' && typeof value.fingerprint === 'string' ? value : null
    } catch {
      return null
    }
  }

  private async writeMarker(key: SandboxKey, marker: Marker): Promise<void> {
    const path = this.markerPath(key)
    await mkdir(dirname(path), { recursive: true })
    await writeFile(path, JSON.stringify(marker))
  }

  private async removeMarker(key: SandboxKey): Promise<void> {
    await rm(this.markerPath(key), { force: true })
  }

  /**
   * Workspaces of threads that no longer exist (a deleted thread or org): their rows go
   * (the blob sweeper then removes their archives, which nothing names any more), and so
   * do this instance's copies and markers. Returns how many rows and copies went.
   */
  async sweep(): Promise<{ rows: number; copies: number }> {
    const candidates = rowsOf<{ org_id: string; thread_id: string }>(
      await this.o.db.execute(sql`
      select org_id, thread_id from thread_workspaces
      where holder is null or lease_expires_at < now()
      order by saved_at nulls first limit 500`)
    ).map((r) => ({ orgId: r.org_id, threadId: r.thread_id }))
    let rowsGone = 0
    const existing = await this.o.runs.existingThreads(candidates)
    for (const key of candidates) {
      if (existing.has(this.id(key))) continue
      const deleted = rowsOf(
        await this.o.db.execute(sql`
        delete from thread_workspaces where org_id = ${key.orgId} and thread_id = ${key.threadId}
          and (holder is null or lease_expires_at < now()) returning 1`)
      )
      rowsGone += deleted.length
    }
    let copies = 0
    const sandboxes = this.o.root
    for (const org of await readdir(sandboxes).catch(() => [] as string[])) {
      const threads = (await readdir(join(sandboxes, org)).catch(() => [] as string[])).filter(
        (name) => !name.startsWith('.')
      )
      const keys = threads.map((threadId) => ({ orgId: org, threadId }))
      const alive = await this.o.runs.existingThreads(keys)
      for (const key of keys) {
        if (alive.has(this.id(key)) || this.held.has(this.id(key))) continue
        await this.locked(key, async () => {
          if (this.held.has(this.id(key))) return
          await this.o.sandboxes.destroy(key)
          await rm(this.pathOf(key), { recursive: true, force: true })
          await this.removeMarker(key)
          copies++
        })
      }
      await rmdir(join(sandboxes, org)).catch(() => {})
    }
    return { rows: rowsGone, copies }
  }

  /**
   * Stops renewing and frees every lease this instance holds, saving what changed
   * (graceful shutdown; sessions still open are ended here).
   */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await this.unlisten?.().catch(() => {})
    // a sweep or renewal in flight is not waited for: the frees below end what it could touch
    this.loop?.kill()
    for (const held of [...this.held.values()]) {
      await this.locked(held.key, async () => {
        held.sessions = 1
        await this.leave(held.key)
      }).catch((err: unknown) => this.o.log.warn({ err }, 'freeing a thread workspace at shutdown failed'))
    }
  }

  /** Simulates a crash (tests): nothing more is renewed, saved or freed; the leases expire. */
  kill(): void {
    this.closed = true
    this.loop?.kill()
    void this.unlisten?.().catch(() => {})
    this.held.clear()
  }
}
