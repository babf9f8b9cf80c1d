import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { embeddedPassOnly } from '../passes.js'
import { DataDirLockedError, LOCK_FILE, lockDataDir } from '../../src/db/data-dir-lock.js'
import { openDatabase } from '../../src/db/client.js'

const tempDir = (t: { teardown(fn: () => unknown): void }) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-lock-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** The pid of a process that existed and is gone. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' })
  await once(child, 'exit')
  return child.pid!
}

t.test(
  'one holder per directory: the second is refused with the directory and the holder pid',
  { skip: embeddedPassOnly },
  async (t) => {
    const dir = tempDir(t)
    const lock = lockDataDir(dir)
    const text = readFileSync(join(dir, LOCK_FILE), 'utf8')
    t.match(text, new RegExp(`^${process.pid}( \\d+)?\\n$`), 'the file names the holder')
    const err = t.throws(() => lockDataDir(dir)) as DataDirLockedError
    t.type(err, DataDirLockedError)
    t.equal(err.holderPid, process.pid)
    t.match(err.message, dir)
    t.match(err.message, `pid ${process.pid}`)
    lock.release()
    t.notOk(existsSync(join(dir, LOCK_FILE)), 'released: the file is gone')
    lockDataDir(dir).release()
  }
)

t.test(
  'a lock whose holder is gone, or whose pid now names another process, is taken over',
  { skip: embeddedPassOnly },
  async (t) => {
    const dir = tempDir(t)
    writeFileSync(join(dir, LOCK_FILE), `${await deadPid()} 12345\n`)
    const first = lockDataDir(dir)
    t.match(
      readFileSync(join(dir, LOCK_FILE), 'utf8'),
      new RegExp(`^${process.pid}\\b`),
      "the dead holder's lock was taken over"
    )
    first.release()

    // pid reuse (a container restarted as pid 1): the pid is alive but started at another time
    if (existsSync(`/proc/${process.pid}/stat`)) {
      writeFileSync(join(dir, LOCK_FILE), `${process.pid} 1\n`)
      const second = lockDataDir(dir)
      t.pass('a live pid with another start time is not the holder')
      second.release()
    }
  }
)

t.test('release never removes a lock another process holds now', { skip: embeddedPassOnly }, async (t) => {
  const dir = tempDir(t)
  const lock = lockDataDir(dir)
  writeFileSync(join(dir, LOCK_FILE), '1\n') // as if taken over meanwhile
  lock.release()
  t.equal(readFileSync(join(dir, LOCK_FILE), 'utf8'), '1\n')
})

t.test(
  'openDatabase on PGlite takes the lock before opening and gives it back at close',
  { skip: embeddedPassOnly },
  async (t) => {
    const dir = tempDir(t)
    const database = await openDatabase({ dataDir: dir })
    t.ok(existsSync(join(dir, LOCK_FILE)))
    await t.rejects(openDatabase({ dataDir: dir }), DataDirLockedError)
    await database.close()
    t.notOk(existsSync(join(dir, LOCK_FILE)), 'released at close')
  }
)
