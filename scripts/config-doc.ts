// docs/configuration.md is written from the one schema of the environment (src/config.ts):
// `npm run docs:config` rewrites it, and test/docs-config.test.ts fails when it is stale.
// Each variable's row is its schema's `default` (or `docDefault`, where the default is
// decided from other variables) and its `description`.
import { writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { EnvSchema } from '../src/config.js'

export const CONFIG_DOC = 'docs/configuration.md'

const HEADER = `# Configuration

Every variable is validated at boot against one schema (\`src/config.ts\`); a bad value
stops the process with a message naming it. Empty values count as unset.

<!-- Written by \`npm run docs:config\` from the schema in src/config.ts: edit the schema, not this table. -->

| Variable | Default | Meaning |
| --- | --- | --- |
`

interface Described {
  default?: unknown
  docDefault?: string
  description?: string
}

function defaultOf(schema: Described): string {
  if (schema.docDefault !== undefined) return schema.docDefault
  if (schema.default === undefined) return 'unset'
  if (schema.default === '') return 'empty'
  return `\`${String(schema.default)}\``
}

/** The page, as the schema says it. */
export function configurationMarkdown(): string {
  const rows = Object.entries(EnvSchema.properties as Record<string, Described>).map(([name, schema]) => {
    if (!schema.description) throw new Error(`${name} has no description in src/config.ts`)
    return `| \`${name}\` | ${defaultOf(schema)} | ${schema.description.replace(/\|/g, '\\|')} |`
  })
  return `${HEADER}${rows.join('\n')}\n`
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(CONFIG_DOC, configurationMarkdown())
  process.stdout.write(`${CONFIG_DOC} written\n`)
}
