// A service or shared plugin says what it needs of the app (fastify-plugin `dependencies`),
// so a group booted alone, or registered in the wrong order, stops with a message naming
// what is missing instead of failing later on an undefined decorator.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import Fastify from 'fastify'
import t from 'tap'
import { embeddedOnly } from '../passes.js'

/** Every file of src/ and plugins/ that exports a fastify-plugin as its default. */
function pluginFiles(): string[] {
  const files = readdirSync('src', { recursive: true, encoding: 'utf8' })
    .map((f) => join('src', f))
    .concat(readdirSync('plugins', { recursive: true, encoding: 'utf8' }).map((f) => join('plugins', f)))
  return files.filter((f) => f.endsWith('.ts') && /^export default fp\(/m.test(readFileSync(f, 'utf8')))
}

interface PluginMeta {
  name?: string
  dependencies?: string[]
}

t.test('a plugin that waits at shutdown through app.shutdown depends on it', embeddedOnly, async (t) => {
  const files = pluginFiles()
  t.ok(files.length > 10, 'the plugins are found')
  for (const file of files) {
    if (!/\bapp\.shutdown\./.test(readFileSync(file, 'utf8'))) continue
    const plugin = (await import(pathToFileURL(join(process.cwd(), file)).href)) as { default: object }
    const meta = (plugin.default as Record<symbol, PluginMeta>)[Symbol.for('plugin-meta')]
    t.ok(meta?.dependencies?.includes('shutdown-refusals'), `${file} (${meta?.name}) declares shutdown-refusals`)
  }
})

t.test('a service registered without what it needs stops the start, naming it', embeddedOnly, async (t) => {
  const { default: secretsService } = await import('../../src/secrets/service.js')
  const app = Fastify()
  t.teardown(() => app.close())
  app.register(secretsService, {} as never)
  await t.rejects(async () => app.ready(), /dependency 'db' of plugin 'secrets' is not registered/)
})
