// Builds the Memory Hub console (web/hub/) with esbuild into
// .build/hub-<hash of its sources>/ (written in a temp directory and renamed into place
// whole), and points the .build/hub symlink at it with one rename. Like the server build,
// it runs only when the sources changed: `npm ci` (prepare) and `npm start` call it through
// scripts/build.mjs; the browser tests call it before they start a server.
import { createHash, randomBytes } from 'node:crypto'
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync
} from 'node:fs'
import { createRequire } from 'node:module'
import { basename, dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const SOURCES = join(root, 'web', 'hub')
const BUILDS = join(root, '.build')
/** Where the server looks for the console (plugins/hub.ts): a symlink to the current build. */
export const HUB_LINK = join(BUILDS, 'hub')

/** Every file under `dir`, at any depth (scripts/build.mjs hashes its sources with it too). */
export function filesUnder(dir) {
  const out = []
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...filesUnder(path))
    else if (entry.isFile()) out.push(path)
  }
  return out
}

const versionOf = (require, name) => JSON.parse(readFileSync(require.resolve(`${name}/package.json`), 'utf8')).version

/** A hash of what the bundle is made of: the sources, this script, and the versions of preact and esbuild. */
export function hubSourceHash(require) {
  const hash = createHash('sha256')
  const files = [...filesUnder(SOURCES), fileURLToPath(import.meta.url)].map((path) => relative(root, path)).sort()
  for (const file of files) {
    hash.update(`${file}\0`)
    hash.update(readFileSync(join(root, file)))
    hash.update('\0')
  }
  hash.update(`preact ${versionOf(require, 'preact')}\0esbuild ${versionOf(require, 'esbuild')}`)
  return hash.digest('hex').slice(0, 16)
}

function linkHub(name) {
  try {
    if (lstatSync(HUB_LINK).isSymbolicLink() && readlinkSync(HUB_LINK) === name) return
  } catch {
    // no link yet
  }
  const temp = join(BUILDS, `.hub-link-${process.pid}-${randomBytes(4).toString('hex')}`)
  symlinkSync(name, temp)
  renameSync(temp, HUB_LINK)
}

/** The page: no inline script or style; the server fills in its release (plugins/hub.ts). */
function indexHtml(js, css) {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="cairn-release" content="%CAIRN_RELEASE%">
<title>Memory Hub · Cairn</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/hub/assets/${css}">
<script type="module" src="/hub/assets/${js}"></script>
</head>
<body>
<div id="app"><p class="boot">Loading the Memory Hub…</p></div>
<noscript><p class="boot">The Memory Hub needs JavaScript.</p></noscript>
</body>
</html>
`
}

/**
 * Makes sure .build/hub-<hash> exists and .build/hub points at it; returns the link.
 * Throws when esbuild or preact is missing (an install without devDependencies) and no
 * build exists.
 */
export function ensureHubBuild({ log = (line) => process.stderr.write(`${line}\n`) } = {}) {
  const require = createRequire(join(root, 'package.json'))
  let hash
  try {
    hash = hubSourceHash(require)
  } catch (err) {
    if (existsSync(HUB_LINK)) return HUB_LINK
    const error = new Error(
      `the Memory Hub console cannot be built (${err.code === 'MODULE_NOT_FOUND' ? 'esbuild or preact is not installed: run `npm ci`' : err.message})`
    )
    error.code = 'CAIRN_HUB_UNBUILDABLE'
    throw error
  }
  const name = `hub-${hash}`
  const out = join(BUILDS, name)
  if (!existsSync(out)) {
    mkdirSync(BUILDS, { recursive: true })
    const started = Date.now()
    const temp = join(BUILDS, `tmp-${process.pid}-${randomBytes(4).toString('hex')}`)
    const esbuild = require('esbuild')
    const result = esbuild.buildSync({
      entryPoints: { app: join(SOURCES, 'main.tsx') },
      bundle: true,
      minify: true,
      format: 'esm',
      target: ['chrome111', 'firefox115', 'safari16.4'],
      jsx: 'automatic',
      jsxImportSource: 'preact',
      entryNames: '[name]-[hash]',
      outdir: join(temp, 'assets'),
      metafile: true,
      legalComments: 'none',
      logLevel: 'error',
      absWorkingDir: root
    })
    const outputs = Object.keys(result.metafile.outputs).map((path) => basename(path))
    const js = outputs.find((file) => file.endsWith('.js'))
    const css = outputs.find((file) => file.endsWith('.css'))
    if (!js || !css)
      throw new Error(`the Memory Hub build made ${outputs.join(', ')}, not one script and one stylesheet`)
    writeFileSync(join(temp, 'index.html'), indexHtml(js, css))
    try {
      renameSync(temp, out)
    } catch (err) {
      // another build of the same sources finished first: theirs is the same
      rmSync(temp, { recursive: true, force: true })
      if (!existsSync(out)) throw err
    }
    log(`cairn: built the Memory Hub console into .build/${name} in ${((Date.now() - started) / 1000).toFixed(1)} s`)
    // older console builds; a running server reads its files through the link, so it serves this one
    for (const entry of readdirSync(BUILDS)) {
      if (/^hub-[0-9a-f]{16}$/.test(entry) && entry !== name)
        rmSync(join(BUILDS, entry), { recursive: true, force: true })
    }
  }
  linkHub(name)
  return HUB_LINK
}

// `node scripts/build-hub.mjs`
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    process.stdout.write(`${ensureHubBuild()}\n`)
  } catch (err) {
    process.stderr.write(`cairn: ${err.message}\n`)
    process.exit(1)
  }
}
