// patch-package applies patches/<name>+<version>.patch to that exact version and fails the
// install on any other: a patched direct dependency is pinned exactly, so a fresh install
// cannot resolve a newer version the patch does not fit.
import { readdirSync, readFileSync } from 'node:fs'
import t from 'tap'
import { embeddedOnly } from './passes.js'

t.test('every patched direct dependency is pinned to the patched version', embeddedOnly, async (t) => {
  const manifest = JSON.parse(readFileSync('package.json', 'utf8')) as {
    dependencies: Record<string, string>
    devDependencies: Record<string, string>
  }
  const direct = { ...manifest.dependencies, ...manifest.devDependencies }
  const patches = readdirSync('patches').filter((f) => f.endsWith('.patch'))
  t.ok(patches.length > 0)
  for (const file of patches) {
    // `@scope+name+1.2.3.patch` patches `@scope/name` at 1.2.3
    const match = /^(.+)\+(\d+\.\d+\.\d+[^+]*)\.patch$/.exec(file)
    t.ok(match, `${file} names a package and a version`)
    const name = match![1]!.replace('+', '/')
    const version = match![2]!
    const installed = (JSON.parse(readFileSync(`node_modules/${name}/package.json`, 'utf8')) as { version: string })
      .version
    t.equal(installed, version, `${name}: the installed version is the patched one`)
    if (name in direct) t.equal(direct[name], version, `${name} is pinned to ${version} in package.json`)
  }
})
