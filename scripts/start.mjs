// `npm start`: builds only when the sources changed (see build.mjs), then runs the server
// in this same process (signals reach it directly).
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { ensureBuild, root } from './build.mjs'
import { ensureHubBuild } from './build-hub.mjs'

let dir
try {
  dir = ensureBuild()
} catch (err) {
  const fallback = join(root, 'dist')
  if (err.code === 'CAIRN_NO_TYPESCRIPT' && existsSync(join(fallback, 'src', 'server.js'))) {
    process.stderr.write(`cairn: warning: ${err.message}; starting the existing build in dist/\n`)
    dir = fallback
  } else {
    process.stderr.write(`cairn: ${err.message}\n`)
    process.exit(1)
  }
}
// the console (/hub/) is a page beside the API: without it the API still starts
try {
  ensureHubBuild()
} catch (err) {
  process.stderr.write(`cairn: warning: ${err.message}; /hub/ answers 503 until it is built\n`)
}
await import(pathToFileURL(join(dir, 'src', 'server.js')).href)
