// `npm test -- test/<group>` runs that folder's tests alone. tap expands a folder into the
// files of its test extensions, and `.ts` is not one here (its TypeScript plugin is left
// out, .taprc: tsx loads the tests), so a folder is handed to tap as the glob of its tests;
// every other argument goes through as it is.
import { spawnSync } from 'node:child_process'
import { statSync } from 'node:fs'

const args = process.argv.slice(2).map((arg) => {
  const isFolder = !arg.startsWith('-') && statSync(arg, { throwIfNoEntry: false })?.isDirectory() === true
  return isFolder ? `${arg.replace(/\/+$/, '')}/**/*.test.ts` : arg
})
const tap = spawnSync('tap', args, { stdio: 'inherit' })
process.exit(tap.status ?? 1)
