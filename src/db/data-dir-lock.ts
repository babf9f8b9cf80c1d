import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'

/**
 * One process per embedded data directory. Two PGlite processes on one
 * directory each keep their own copy of the database in memory and overwrite each other's
 * files: the first one's writes are lost at the next restart. So the directory holds a lock
 * file, created with O_EXCL, naming its holder: pid and the process's start time. A holder
 * that no longer exists (killed with -9, machine restarted) leaves a stale file that the
 * next start takes over: its pid is gone, or now belongs to another process (another start
 * time: a container restart reuses pid 1). proper-lockfile was the library candidate, but it
 * records no pid (the message must name the holder) and judges staleness by an mtime that a
 * timer refreshes, so a paused or busy holder can lose its lock.
 */
export const LOCK_FILE = 'cairn.lock'

export class DataDirLockedError extends Error {
  override name = 'DataDirLockedError'
  readonly holderPid: number
  constructor(dir: string, holderPid: number) {
    super(
      `data directory ${dir} is in use by another Cairn process (pid ${holderPid}); ` +
        'stop it first, or give this one its own DATA_DIR (or DATABASE_URL)'
    )
    this.holderPid = holderPid
  }
}

interface Holder {
  pid: number
  /** the process's start time from /proc (clock ticks since boot), when the platform has it */
  started: string | null
}

/** Field 22 of /proc/<pid>/stat; null where there is no /proc or no such process. */
function startTimeOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // the command name (field 2) may hold spaces and parentheses: count after its last ')'
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null
  } catch {
    return null
  }
}

function isAlive(holder: Holder): boolean {
  try {
    process.kill(holder.pid, 0)
  } catch (err) {
    // EPERM: it exists but belongs to another user
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false
  }
  if (holder.started === null) return true
  const now = startTimeOf(holder.pid)
  return now === null || now === holder.started
}

function readHolder(file: string): { holder: Holder | null; text: string } | null {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  const match = /^(\d+)(?: (\d+))?\s*$/.exec(text)
  return { holder: match ? { pid: Number(match[1]), started: match[2] ?? null } : null, text }
}

export interface DataDirLock {
  release(): void
}

/** Takes the lock of `dir` (which must exist) or throws DataDirLockedError naming the holder. */
export function lockDataDir(dir: string): DataDirLock {
  const file = join(dir, LOCK_FILE)
  const started = startTimeOf(process.pid)
  const mine = started === null ? `${process.pid}\n` : `${process.pid} ${started}\n`
  for (let attempt = 0; ; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o644)
      try {
        writeSync(fd, mine)
      } finally {
        closeSync(fd)
      }
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
    const found = readHolder(file)
    if (found === null) continue // released meanwhile
    // an empty or half-written file: its writer is between open and write, or died there
    if (found.holder === null) {
      if (attempt < 20) {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 25)
        continue
      }
    } else if (isAlive(found.holder)) {
      throw new DataDirLockedError(dir, found.holder.pid)
    }
    if (attempt >= 25) throw new Error(`could not take the lock ${file}`)
    // stale: remove it unless another starter replaced it meanwhile, then try again
    if (readHolder(file)?.text === found.text) {
      try {
        unlinkSync(file)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      }
    }
  }

  let held = true
  const release = () => {
    if (!held) return
    held = false
    process.off('exit', release)
    // only our own file: never one a later holder wrote after ours was taken over
    if (readHolder(file)?.text === mine) {
      try {
        unlinkSync(file)
      } catch {
        // already gone
      }
    }
  }
  // a process that exits without closing the database (process.exit) still frees it
  process.on('exit', release)
  return { release }
}
