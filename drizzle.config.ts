import { defineConfig } from 'drizzle-kit'

// `npm run db:generate` diffs the tables against drizzle/ and writes the next migration.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./src/*/tables.ts', './plugins/*/tables.ts'],
  out: './drizzle'
})
