import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * A new embedded database starts from a template instead of initdb: initdb in WebAssembly is
 * most of a first start (about 7 of 11 CPU seconds here), while loading the same files from
 * a tar takes well under a second. `npm ci` makes the template (scripts/build.mjs: a fresh
 * PGlite's data directory, dumped uncompressed, per PGlite version, in .build/); where there
 * is none (a container image, an install without it) PGlite runs initdb as before.
 */
export function pgliteTemplate(location: string): Blob | undefined {
  if (existsSync(join(location, 'PG_VERSION'))) return undefined
  const file = templateFile()
  return file ? new Blob([readFileSync(file)]) : undefined
}

/** .build/pglite-<version>.tar beside the node_modules that holds PGlite, when it exists. */
function templateFile(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 6; i++) {
    const manifest = join(dir, 'node_modules', '@electric-sql', 'pglite', 'package.json')
    if (existsSync(manifest)) {
      const { version } = JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }
      const file = join(dir, '.build', `pglite-${version}.tar`)
      return existsSync(file) ? file : null
    }
    dir = dirname(dir)
  }
  return null
}
