// Runs the TypeScript sources on Node itself, without a compiler: Node 22 strips the types of a
// `.ts` file as it loads it (the sources keep to erasable syntax and `import type`, which
// tsconfig enforces, so nothing else needs rewriting, and lines and columns stay as written).
// What Node does not do is the one TypeScript convention the sources follow: a relative import
// names the file as it will be once compiled (`./client.js`) while the checkout holds
// `./client.ts`. This hook resolves such an import from a `.ts` file to the `.ts` file beside
// it when there is one; everything else resolves as Node resolves it.
//
// The tests load it (`--import=./scripts/ts-resolve.mjs`, .taprc): loading the app's module
// graph through tsx's hooks (a transform cache lookup for each of ~2,400 modules, most of them
// packages) cost each test process about 0.8 s of CPU more than this does. Worker threads
// inherit it, as they inherit any `--import`.
import { existsSync } from 'node:fs'
import module from 'node:module'
import { fileURLToPath } from 'node:url'

// Node strips types from 22.18 on, and registerHooks is from 22.15: `npm test` runs the Node of
// the `node` devDependency (npm puts node_modules/.bin first on the PATH), which has both
if (typeof module.registerHooks !== 'function' || !process.features.typescript)
  throw new Error(`the tests need Node 22.18 or later (this is ${process.version}): run them with npm test`)

module.registerHooks({
  resolve(specifier, context, next) {
    const parent = context.parentURL
    if (
      parent?.startsWith('file:') &&
      parent.endsWith('.ts') &&
      specifier.endsWith('.js') &&
      (specifier.startsWith('./') || specifier.startsWith('../'))
    ) {
      const source = new URL(`${specifier.slice(0, -3)}.ts`, parent)
      if (existsSync(fileURLToPath(source))) return next(source.href, context)
    }
    return next(specifier, context)
  }
})
