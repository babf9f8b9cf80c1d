// ESLint: the recommended JavaScript rules and typescript-eslint's strict set, over the
// service, its plugins and schemas, the Memory Hub console (web/), the tests, the benches and
// the scripts.
import js from '@eslint/js'
import globals from 'globals'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['dist/', '.build/', 'data/', 'node_modules/', 'drizzle/', '.tap/'] },
  js.configs.recommended,
  ...tseslint.configs.strict,
  {
    rules: {
      // noUncheckedIndexedAccess is on: `xs[0]!` marks an index the code has just checked or
      // built, and the compiler keeps every other access honest
      '@typescript-eslint/no-non-null-assertion': 'off',
      // `{ secret: _secret, ...rest }` drops a field on purpose
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true }
      ],
      // Prettier formats the code at 120 columns but wraps neither comments nor strings:
      // comments are held to the same width here; strings, templates (SQL) and URLs may pass it
      'max-len': [
        'error',
        { code: 120, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true, ignoreUrls: true }
      ]
    }
  },
  {
    // test doubles read whatever JSON the code under test sends them
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' }
  },
  {
    languageOptions: {
      ecmaVersion: 2023,
      sourceType: 'module',
      globals: globals.node
    }
  },
  {
    // the Memory Hub console runs in the browser (its own tsconfig has the DOM types)
    files: ['web/**/*.{ts,tsx}'],
    languageOptions: { globals: globals.browser },
    rules: {
      // its wire types are the server's schemas, for their types only: a value import
      // would bundle TypeBox (and whatever the schema file imports) into the page
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/schemas/*', 'typebox', 'typebox/*'],
              allowTypeImports: true,
              message: 'the console imports schemas and TypeBox with `import type` only'
            }
          ]
        }
      ]
    }
  }
)
