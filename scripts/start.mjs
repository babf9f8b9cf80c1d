// `npm start`: builds only when the sources changed (see build.mjs), then runs the server
// in this same process (signals reach it directly).
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { ensureBuild, root } from './build.mjs'

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
await import(pathToFileURL(join(dir, 'src', 'server.js')).href)
