// docs/configuration.md is the schema of src/config.ts written out (scripts/config-doc.ts):
// a variable added, removed or reworded there and not written out fails here.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { CONFIG_DOC, configurationMarkdown } from '../scripts/config-doc.js'
import { embeddedOnly } from './passes.js'

t.test('docs/configuration.md is what the config schema says (npm run docs:config)', embeddedOnly, async (t) => {
  const written = readFileSync(CONFIG_DOC, 'utf8')
  const wanted = configurationMarkdown()
  if (written !== wanted) {
    const have = new Set(written.split('\n'))
    const stale = wanted.split('\n').filter((line) => !have.has(line))
    t.fail(`${CONFIG_DOC} is stale; run npm run docs:config. Rows it lacks or words differently:\n${stale.join('\n')}`)
  } else t.pass(`${CONFIG_DOC} is up to date`)
})
