import { readFileSync } from 'node:fs'
import { posix } from 'node:path'
import { gunzipSync } from 'node:zlib'
import type { Extension } from '@electric-sql/pglite'
import { parseTar } from 'nanotar'

/** Where PGlite keeps its installation inside its in-memory file system (its WASM_PREFIX). */
const PGLITE_PREFIX = '/pglite'

interface EmscriptenFs {
  mkdirTree(path: string): void
  writeFile(path: string, data: Uint8Array): void
}

/**
 * A PGlite extension whose bundle (`<name>.tar.gz`) is read and unpacked synchronously, into
 * the database's file system before Postgres starts, instead of by PGlite.
 *
 * Why: on Node, PGlite reads a bundle through a stream pipeline (file stream, gunzip, a
 * collecting Writable) while it starts its WebAssembly module. After that sequence, Node 20's
 * `process.nextTick` runs about five times slower for the rest of the process (V8 takes a
 * runtime path for every tick object), and every HTTP request makes several ticks: the
 * service spent about 5 µs more CPU per request on PGlite than on Postgres
 * (bench/foundation.ts). Read synchronously, the same files leave `nextTick` as fast as
 * without the extension. The shared library is loaded by Postgres itself on
 * `CREATE EXTENSION`, as any library in that file system.
 */
export function unpackedBundle(extension: Extension): Extension {
  return {
    name: extension.name,
    async setup(pg, emscriptenOpts, clientOnly) {
      const { bundlePath, ...rest } = await extension.setup(pg, emscriptenOpts, clientOnly)
      if (!bundlePath) return { ...rest }
      const files = parseTar(gunzipSync(readFileSync(bundlePath))).filter((item) => item.type === 'file' && item.data)
      const opts = rest.emscriptenOpts ?? emscriptenOpts
      const install = (mod: { FS: EmscriptenFs }) => {
        for (const file of files) {
          const path = posix.join(PGLITE_PREFIX, file.name)
          mod.FS.mkdirTree(posix.dirname(path))
          mod.FS.writeFile(path, file.data!)
        }
      }
      return { ...rest, emscriptenOpts: { ...opts, preRun: [...(opts.preRun ?? []), install] } }
    }
  }
}
