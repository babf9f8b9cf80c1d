import { deepStrictEqual } from 'node:assert/strict'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import {
  checkSkillFields,
  parseSkillMd,
  renderSkillMd,
  SKILL_COMPATIBILITY_MAX,
  SKILL_DESCRIPTION_MAX,
  SKILL_NAME_MAX,
  type ParsedSkill,
  type SkillFields,
  type SkillProblem
} from '../../src/skills/skill-md.js'

const FILE = `---
name: release-notes
description: "Write release notes: from merged pull requests, grouped by area."
license: Apache-2.0
compatibility: Needs git and a network
allowed-tools: Bash(git:*) Read
metadata:
  author: platform
  version: 1.0
---

# Release notes

List the merged pull requests since the last tag, then group them.
`

const SKILL: SkillFields = {
  name: 'release-notes',
  description: 'Write release notes: from merged pull requests, grouped by area.',
  instructions: '# Release notes\n\nList the merged pull requests since the last tag, then group them.',
  license: 'Apache-2.0',
  compatibility: 'Needs git and a network',
  allowedTools: ['Bash(git:*)', 'Read'],
  metadata: { author: 'platform', version: '1.0' }
}

/** The problems of a file that must not parse. */
function problemsOf(t: Test, parsed: ParsedSkill): SkillProblem[] {
  t.equal(parsed.ok, false, 'refused')
  return parsed.ok ? [] : parsed.problems
}

/** A file with the given front matter lines. */
const file = (...front: string[]) => `---\n${front.join('\n')}\n---\nBody\n`

const HINT = "(quote the value if it contains ': ')"
const UNKNOWN = '(allowed: name, description, license, compatibility, allowed-tools, metadata)'

t.test('a valid file with every field', async (t) => {
  t.strictSame(parseSkillMd(FILE), { ok: true, skill: SKILL })
})

t.test('the failsafe schema: every scalar is text', async (t) => {
  const parsed = parseSkillMd(
    file(
      'name: 123',
      'description: true',
      'license: null',
      'compatibility: ~',
      'metadata:',
      '  version: 1.0',
      '  on: yes',
      '  n: 0x1F'
    )
  )
  t.strictSame(parsed, {
    ok: true,
    skill: {
      name: '123',
      description: 'true',
      instructions: 'Body',
      license: 'null',
      compatibility: '~',
      allowedTools: [],
      metadata: { version: '1.0', on: 'yes', n: '0x1F' }
    }
  })
})

t.test('optional fields left empty are absent; quoted empty text is kept', async (t) => {
  const parsed = parseSkillMd(
    file('name: a', 'description: b', 'license:', 'compatibility: ""', 'allowed-tools:', 'metadata:')
  )
  t.strictSame(parsed, {
    ok: true,
    skill: {
      name: 'a',
      description: 'b',
      instructions: 'Body',
      license: null,
      compatibility: '',
      allowedTools: [],
      metadata: {}
    }
  })
})

t.test('an unquoted ": " in a value: the YAML error with its place in the file and a hint', async (t) => {
  const problems = problemsOf(t, parseSkillMd('---\nname: notes\ndescription: Use when: you need notes\n---\nBody'))
  t.strictSame(problems, [
    { path: '/skillMd', message: `Nested mappings are not allowed in compact mappings ${HINT}`, line: 3, column: 14 }
  ])
  t.notMatch(problems[0]!.message, /\n/, 'one line, no code frame')
  t.notMatch(problems[0]!.message, /at line/, 'the position is in line and column, not in the sentence')

  const noValue = problemsOf(t, parseSkillMd(file('name: notes', 'description: fine', 'just words')))
  t.strictSame(noValue, [
    { path: '/skillMd', message: `Implicit map keys need to be followed by map values ${HINT}`, line: 4, column: 1 }
  ])
})

t.test('bad indentation: every error yaml reports, each placed in the file', async (t) => {
  const problems = problemsOf(t, parseSkillMd(file('name: notes', '  description: fine')))
  t.ok(problems.length >= 1)
  for (const p of problems) t.match(p, { path: '/skillMd', line: 2, column: 7, message: /quote the value/ })

  const uneven = problemsOf(
    t,
    parseSkillMd(file('name: notes', 'description: fine', 'metadata:', '    a: x', '  b: y'))
  )
  t.strictSame(uneven, [
    { path: '/skillMd', message: 'All mapping items must start at the same column', line: 6, column: 1 }
  ])
})

t.test('tab indentation', async (t) => {
  const problems = problemsOf(t, parseSkillMd(file('name: notes', 'description: fine', 'metadata:', '\tauthor: me')))
  t.strictSame(problems, [{ path: '/skillMd', message: 'Tabs are not allowed as indentation', line: 5, column: 1 }])
})

t.test('a duplicate key is an error at the second one', async (t) => {
  const problems = problemsOf(t, parseSkillMd(file('name: notes', 'description: one', 'description: two')))
  t.strictSame(problems, [{ path: '/skillMd', message: 'Map keys must be unique', line: 4, column: 1 }])
  const inMetadata = problemsOf(
    t,
    parseSkillMd(file('name: notes', 'description: one', 'metadata:', '  a: x', '  a: y'))
  )
  t.match(inMetadata, [{ path: '/skillMd', line: 6, column: 3 }])
})

t.test('front matter in another language is refused, and nothing in it runs', async (t) => {
  const g = globalThis as { pwned?: boolean }
  for (const tag of ['js', 'javascript', 'coffee', 'json']) {
    const problems = problemsOf(
      t,
      parseSkillMd(
        `---${tag}\nmodule.exports = { name: (globalThis.pwned = true, "x"), description: "d" }\n---\nBody\n`
      )
    )
    t.strictSame(problems, [
      {
        path: '/skillMd',
        message: `front matter in '${tag}' is not accepted: a SKILL.md's front matter is YAML ('---' alone)`,
        line: 1,
        column: 4
      }
    ])
  }
  t.match(problemsOf(t, parseSkillMd('--- js\n({ name: (globalThis.pwned = true) })\n---\n')), [
    { line: 1, column: 5, message: /'js' is not accepted/ }
  ])
  t.equal(g.pwned, undefined, 'nothing executed')

  // a YAML tag is no way in either: failsafe knows no !!js types, and a warning fails the file
  const tagged = problemsOf(
    t,
    parseSkillMd(file('name: !!js/function "function () { globalThis.pwned = true }"', 'description: d'))
  )
  t.match(tagged, [{ path: '/skillMd', line: 2, column: 7, message: /tag/i }])
  t.equal(g.pwned, undefined, 'nothing executed')
})

t.test('---yaml is YAML', async (t) => {
  t.strictSame(parseSkillMd(FILE.replace(/^---/, '---yaml')), { ok: true, skill: SKILL })
  t.strictSame(parseSkillMd(FILE.replace(/^---/, '---yml  ')), { ok: true, skill: SKILL })
})

t.test('the fences', async (t) => {
  const start = { path: '/skillMd', message: "a SKILL.md starts with '---' and YAML front matter", line: 1, column: 1 }
  t.strictSame(problemsOf(t, parseSkillMd('name: notes\ndescription: d\n')), [start])
  t.strictSame(problemsOf(t, parseSkillMd('\n---\nname: notes\ndescription: d\n---\n')), [start])
  t.strictSame(problemsOf(t, parseSkillMd('')), [start])
  t.strictSame(problemsOf(t, parseSkillMd('----\nname: notes\n---\n')), [start])

  t.strictSame(problemsOf(t, parseSkillMd('---\nname: notes\ndescription: d\n\nBody\n')), [
    { path: '/skillMd', message: "the front matter is not closed by a '---' line", line: 1, column: 1 }
  ])
  // an indented fence is part of a YAML value, not the end of the front matter
  t.match(problemsOf(t, parseSkillMd('---\nname: notes\ndescription: |\n  ---\n')), [
    { line: 1, message: /not closed/ }
  ])

  t.match(
    parseSkillMd('---  \t\nname: notes\ndescription: d\n...\nBody'),
    { ok: true, skill: { name: 'notes', instructions: 'Body' } },
    '... closes too'
  )
  t.match(
    parseSkillMd('---\nname: notes\ndescription: d\n--- \t\n\n\n  Body\n---\nmore  \n\n'),
    {
      ok: true,
      skill: { instructions: '  Body\n---\nmore' }
    },
    'the first closing line ends the front matter; blank lines before and whitespace after the body go'
  )
})

t.test('the front matter must be a mapping', async (t) => {
  const message = 'the front matter must be a mapping of fields (name: …, description: …)'
  t.strictSame(problemsOf(t, parseSkillMd(file('- name', '- description'))), [
    { path: '/skillMd', message, line: 2, column: 1 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('just a sentence'))), [
    { path: '/skillMd', message, line: 2, column: 1 }
  ])
  t.strictSame(
    problemsOf(t, parseSkillMd('---\n---\nBody')),
    [
      { path: '/skillMd/name', message: 'name is required', line: 2, column: 1 },
      { path: '/skillMd/description', message: 'description is required', line: 2, column: 1 }
    ],
    'empty front matter: the required fields are missing'
  )
})

t.test('name rules', async (t) => {
  const nameProblems = (name: string) => {
    const parsed = parseSkillMd(file(`name: ${JSON.stringify(name)}`, 'description: d'))
    return parsed.ok ? [] : parsed.problems
  }
  const at = { path: '/skillMd/name', line: 2, column: 7 }
  t.strictSame(nameProblems('a'.repeat(SKILL_NAME_MAX)), [], '64 characters')
  t.strictSame(nameProblems('a0-9-z'), [])
  t.strictSame(nameProblems('a'.repeat(SKILL_NAME_MAX + 1)), [{ ...at, message: 'name has 65 characters; at most 64' }])
  t.strictSame(nameProblems('Notes'), [
    { ...at, message: 'name may contain only lowercase letters, digits and hyphens' }
  ])
  t.strictSame(nameProblems('my_notes'), [
    { ...at, message: 'name may contain only lowercase letters, digits and hyphens' }
  ])
  t.strictSame(nameProblems('-notes'), [{ ...at, message: 'name must not start or end with a hyphen' }])
  t.strictSame(nameProblems('notes-'), [{ ...at, message: 'name must not start or end with a hyphen' }])
  t.strictSame(nameProblems('my--notes'), [{ ...at, message: "name must not contain '--'" }])
  t.strictSame(nameProblems(''), [{ ...at, message: 'name is required' }])
  t.strictSame(
    nameProblems('Bad--Name-'),
    [
      { ...at, message: 'name may contain only lowercase letters, digits and hyphens' },
      { ...at, message: 'name must not start or end with a hyphen' },
      { ...at, message: "name must not contain '--'" }
    ],
    'every rule broken is named'
  )

  t.strictSame(problemsOf(t, parseSkillMd(file('name:', 'description: d'))), [
    { path: '/skillMd/name', message: 'name is required', line: 2, column: 1 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('description: d'))), [
    { path: '/skillMd/name', message: 'name is required', line: 2, column: 1 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('name: [a, b]', 'description: d'))), [
    { path: '/skillMd/name', message: 'name must be text, not a list', line: 2, column: 7 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('description: d', 'name:', '  first: a'))), [
    { path: '/skillMd/name', message: 'name must be text, not a mapping', line: 4, column: 3 }
  ])
})

t.test('description length counts characters, not UTF-16 units', async (t) => {
  const withDescription = (d: string) => parseSkillMd(file('name: notes', `description: ${JSON.stringify(d)}`))
  t.equal(withDescription('d'.repeat(SKILL_DESCRIPTION_MAX)).ok, true, '1,024')
  t.equal(withDescription('🎉'.repeat(SKILL_DESCRIPTION_MAX)).ok, true, '1,024 emoji are 1,024 characters')
  t.equal(withDescription(`  ${'d'.repeat(SKILL_DESCRIPTION_MAX)}  `).ok, true, 'counted after trimming')
  t.strictSame(problemsOf(t, withDescription('d'.repeat(SKILL_DESCRIPTION_MAX + 1))), [
    { path: '/skillMd/description', message: 'description has 1025 characters; at most 1024', line: 3, column: 14 }
  ])
  t.strictSame(problemsOf(t, withDescription('   ')), [
    { path: '/skillMd/description', message: 'description is required', line: 3, column: 14 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('name: notes'))), [
    { path: '/skillMd/description', message: 'description is required', line: 2, column: 1 }
  ])
  t.strictSame(parseSkillMd(file('name: notes', 'description: >-', '  Folded over', '  two lines.')), {
    ok: true,
    skill: {
      name: 'notes',
      description: 'Folded over two lines.',
      instructions: 'Body',
      license: null,
      compatibility: null,
      allowedTools: [],
      metadata: {}
    }
  })
})

t.test('compatibility and license', async (t) => {
  const withCompatibility = (c: string) => parseSkillMd(file('name: notes', 'description: d', `compatibility: ${c}`))
  t.match(withCompatibility('c'.repeat(SKILL_COMPATIBILITY_MAX)), {
    ok: true,
    skill: { compatibility: 'c'.repeat(500) }
  })
  t.strictSame(problemsOf(t, withCompatibility('c'.repeat(SKILL_COMPATIBILITY_MAX + 1))), [
    { path: '/skillMd/compatibility', message: 'compatibility has 501 characters; at most 500', line: 4, column: 16 }
  ])
  t.strictSame(problemsOf(t, withCompatibility('[a]')), [
    { path: '/skillMd/compatibility', message: 'compatibility must be text, not a list', line: 4, column: 16 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('name: notes', 'description: d', 'license: {spdx: MIT}'))), [
    { path: '/skillMd/license', message: 'license must be text, not a mapping', line: 4, column: 10 }
  ])
})

t.test('a BOM is no part of the file', async (t) => {
  t.strictSame(parseSkillMd(`\uFEFF${FILE}`), { ok: true, skill: SKILL })
  t.strictSame(
    problemsOf(t, parseSkillMd('\uFEFF---js\nx\n---\n')),
    [
      {
        path: '/skillMd',
        message: "front matter in 'js' is not accepted: a SKILL.md's front matter is YAML ('---' alone)",
        line: 1,
        column: 4
      }
    ],
    'columns on the first line do not count it'
  )
})

t.test('CRLF and CR line ends: the same skill, the same line numbers', async (t) => {
  t.strictSame(parseSkillMd(FILE.replace(/\n/g, '\r\n')), { ok: true, skill: SKILL })
  t.strictSame(parseSkillMd(FILE.replace(/\n/g, '\r')), { ok: true, skill: SKILL })
  const broken = '---\nname: notes\ndescription: Use when: you need notes\ncolour: blue\n---\nBody\n'
  const expected = problemsOf(t, parseSkillMd(broken))
  t.match(expected, [{ line: 3, column: 14 }])
  t.strictSame(problemsOf(t, parseSkillMd(broken.replace(/\n/g, '\r\n'))), expected)
  t.strictSame(problemsOf(t, parseSkillMd(`\uFEFF${broken.replace(/\n/g, '\r')}`)), expected)
  const unknown = file('name: notes', 'description: d', 'colour: blue').replace(/\n/g, '\r\n')
  t.match(problemsOf(t, parseSkillMd(unknown)), [{ path: '/skillMd/colour', line: 4, column: 1 }])
})

t.test('an unknown field is named at its place', async (t) => {
  t.strictSame(
    problemsOf(t, parseSkillMd(file('name: notes', 'description: d', 'metadata:', '  a: b', 'version: 2'))),
    [{ path: '/skillMd/version', message: `unknown field 'version' ${UNKNOWN}`, line: 6, column: 1 }]
  )
  t.strictSame(
    problemsOf(t, parseSkillMd(file('name: notes', 'description: d', '"a/b~c": x'))),
    [{ path: '/skillMd/a~1b~0c', message: `unknown field 'a/b~c' ${UNKNOWN}`, line: 4, column: 1 }],
    'the path is a JSON pointer'
  )
  t.strictSame(
    problemsOf(t, parseSkillMd(file('name: notes', 'description: d', 'allowedTools: Read'))),
    [{ path: '/skillMd/allowedTools', message: `unknown field 'allowedTools' ${UNKNOWN}`, line: 4, column: 1 }],
    'the file spells it allowed-tools'
  )
})

t.test('metadata', async (t) => {
  t.match(
    parseSkillMd(
      file('name: notes', 'description: d', 'metadata:', '  author: me', '  "1": one', '  empty:', '  __proto__: data')
    ),
    {
      ok: true,
      skill: { metadata: { author: 'me', 1: 'one', empty: '' } }
    }
  )
  const proto = parseSkillMd(file('name: notes', 'description: d', 'metadata:', '  __proto__: data'))
  t.ok(
    proto.ok && Object.hasOwn(proto.skill.metadata, '__proto__') && proto.skill.metadata.__proto__ === 'data',
    'a key named __proto__ is data'
  )
  t.equal(Object.getPrototypeOf(proto.ok ? proto.skill.metadata : null), Object.prototype)

  t.strictSame(
    problemsOf(
      t,
      parseSkillMd(file('name: notes', 'description: d', 'metadata:', '  author:', '    name: me', '  tags: [a, b]'))
    ),
    [
      { path: '/skillMd/metadata/author', message: 'metadata author must be text, not a mapping', line: 6, column: 5 },
      { path: '/skillMd/metadata/tags', message: 'metadata tags must be text, not a list', line: 7, column: 9 }
    ]
  )
  t.strictSame(problemsOf(t, parseSkillMd(file('name: notes', 'description: d', 'metadata: [a]'))), [
    {
      path: '/skillMd/metadata',
      message: 'metadata must be a mapping of names to text, not a list',
      line: 4,
      column: 11
    }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('name: notes', 'description: d', 'metadata: words'))), [
    { path: '/skillMd/metadata', message: 'metadata must be a mapping of names to text, not text', line: 4, column: 11 }
  ])
  t.strictSame(problemsOf(t, parseSkillMd(file('name: notes', 'description: d', 'metadata:', '  ? [a]', '  : b'))), [
    { path: '/skillMd/metadata', message: 'a metadata name must be text', line: 5, column: 5 }
  ])
})

t.test('allowed-tools: a space-separated string or a list', async (t) => {
  const tools = (...lines: string[]) => parseSkillMd(file('name: notes', 'description: d', ...lines))
  t.match(tools('allowed-tools: Bash(git:*)   Read\tEdit '), {
    ok: true,
    skill: { allowedTools: ['Bash(git:*)', 'Read', 'Edit'] }
  })
  t.match(tools('allowed-tools:', '  - Bash(git:*)', '  - Read'), {
    ok: true,
    skill: { allowedTools: ['Bash(git:*)', 'Read'] }
  })
  t.match(tools('allowed-tools: [Read, Edit]'), { ok: true, skill: { allowedTools: ['Read', 'Edit'] } })
  t.match(tools('allowed-tools: ""'), { ok: true, skill: { allowedTools: [] } })
  t.strictSame(problemsOf(t, tools('allowed-tools:', '  Read: yes')), [
    {
      path: '/skillMd/allowed-tools',
      message: 'allowed-tools must be a space-separated string of tool names (or a list), not a mapping',
      line: 5,
      column: 3
    }
  ])
  t.strictSame(problemsOf(t, tools('allowed-tools:', '  - Read', '  - [Bash, Edit]')), [
    { path: '/skillMd/allowed-tools/1', message: 'a tool name must be text, not a list', line: 6, column: 5 }
  ])
})

t.test('anchors and aliases read as what they stand for; a missing anchor is a problem', async (t) => {
  t.match(parseSkillMd(file('name: &n notes', 'description: *n', 'metadata: &m', '  a: b', 'allowed-tools: *n')), {
    ok: true,
    skill: { name: 'notes', description: 'notes', metadata: { a: 'b' }, allowedTools: ['notes'] }
  })
  t.strictSame(problemsOf(t, parseSkillMd(file('name: notes', 'description: *nowhere'))), [
    { path: '/skillMd/description', message: 'alias *nowhere refers to no anchor', line: 3, column: 14 }
  ])
})

t.test('U+0000 is refused where it is', async (t) => {
  t.strictSame(problemsOf(t, parseSkillMd('---\nname: notes\ndescription: d\n---\nstep\u0000 one\n')), [
    { path: '/skillMd', message: 'a SKILL.md must not contain U+0000', line: 5, column: 5 }
  ])
})

t.test('every problem at once, in file order', async (t) => {
  const problems = problemsOf(
    t,
    parseSkillMd(
      file(
        'colour: blue',
        'name: Bad--Name',
        `description: ${'d'.repeat(1025)}`,
        'compatibility: [x]',
        'metadata:',
        '  nested: {a: b}',
        'other: 1'
      )
    )
  )
  t.strictSame(
    problems.map((p) => `${p.path}@${p.line}:${p.column}`),
    [
      '/skillMd/colour@2:1',
      '/skillMd/name@3:7',
      '/skillMd/name@3:7',
      '/skillMd/description@4:14',
      '/skillMd/compatibility@5:16',
      '/skillMd/metadata/nested@7:11',
      '/skillMd/other@8:1'
    ]
  )
})

t.test('checkSkillFields: the same rules for fields sent directly', async (t) => {
  t.strictSame(checkSkillFields(SKILL), [])
  t.strictSame(checkSkillFields({ ...SKILL, instructions: '' }), [], 'instructions may be empty')
  t.strictSame(checkSkillFields({ ...SKILL, name: 'x'.repeat(65), description: '  ' }), [
    { path: '/name', message: 'name has 65 characters; at most 64' },
    { path: '/description', message: 'description is required' }
  ])
  t.strictSame(checkSkillFields({ ...SKILL, name: '-Bad--' }), [
    { path: '/name', message: 'name may contain only lowercase letters, digits and hyphens' },
    { path: '/name', message: 'name must not start or end with a hyphen' },
    { path: '/name', message: "name must not contain '--'" }
  ])
  t.strictSame(checkSkillFields({ ...SKILL, name: '' }), [{ path: '/name', message: 'name is required' }])
  t.strictSame(checkSkillFields({ ...SKILL, description: 'd'.repeat(1025) }), [
    { path: '/description', message: 'description has 1025 characters; at most 1024' }
  ])
  t.strictSame(checkSkillFields({ ...SKILL, compatibility: 'c'.repeat(501) }), [
    { path: '/compatibility', message: 'compatibility has 501 characters; at most 500' }
  ])
  t.strictSame(checkSkillFields({ ...SKILL, allowedTools: ['Read', 'Bash(git status)', ''] }), [
    { path: '/allowedTools/1', message: 'a tool name must not contain spaces: allowed-tools is space-separated' },
    { path: '/allowedTools/2', message: 'a tool name must not be empty' }
  ])
  t.strictSame(checkSkillFields({ ...SKILL, metadata: { 'a/b': { x: 1 } as unknown as string } }), [
    { path: '/metadata/a~1b', message: 'metadata a/b must be text' }
  ])
  t.strictSame(checkSkillFields({ ...SKILL, instructions: 'a\u0000', license: '\u0000', metadata: { k: 'v\u0000' } }), [
    { path: '/instructions', message: 'must not contain U+0000' },
    { path: '/license', message: 'must not contain U+0000' },
    { path: '/metadata/k', message: 'must not contain U+0000' }
  ])
  for (const p of checkSkillFields({ ...SKILL, name: 'X' })) t.notOk('line' in p || 'column' in p, 'no line or column')
})

t.test('renderSkillMd writes the fields in order, quoting what would read as another type', async (t) => {
  t.equal(
    renderSkillMd(SKILL),
    `---
name: release-notes
description: "Write release notes: from merged pull requests, grouped by area."
license: Apache-2.0
compatibility: Needs git and a network
allowed-tools: Bash(git:*) Read
metadata:
  author: platform
  version: "1.0"
---

# Release notes

List the merged pull requests since the last tag, then group them.
`
  )
  const typed = renderSkillMd({
    name: '123',
    description: 'true',
    instructions: '',
    license: 'null',
    compatibility: 'yes',
    allowedTools: [],
    metadata: { on: 'off', n: '0o17', when: '2001-12-14', '': '~' }
  })
  t.equal(
    typed,
    `---
name: "123"
description: "true"
license: "null"
compatibility: "yes"
metadata:
  "on": "off"
  "n": "0o17"
  when: "2001-12-14"
  "": "~"
---

`,
    'empty tools and metadata are left out; no instructions, no body'
  )
  t.match(parseSkillMd(typed), {
    ok: true,
    skill: {
      name: '123',
      description: 'true',
      license: 'null',
      compatibility: 'yes',
      metadata: { on: 'off', n: '0o17', '': '~' }
    }
  })
})

// strings that have broken front matter somewhere: YAML indicators, fences, quotes, spaces
// at either end, line breaks, non-BMP characters, YAML 1.1 booleans
const TRICKY = [
  ': ',
  'a: b',
  'Use when: you need X',
  '#',
  ' # not a comment',
  'a #b',
  '- item',
  '-',
  '? key',
  '[x]',
  '{a: b}',
  '*alias',
  '&anchor',
  '!tag',
  '!!str x',
  '%YAML 1.2',
  '@at',
  '`tick`',
  '|',
  '>',
  '"',
  "'",
  "it's",
  '"quoted"',
  '\\',
  '\\n',
  '  leading',
  'trailing  ',
  '\n',
  'a\nb',
  'a\n\nb\n',
  '\n\nx',
  '  \n x',
  '---',
  '...',
  'x\n---\ny',
  'x\n...\n',
  '1.0',
  '1',
  '-1',
  '0x1F',
  '0o17',
  '1e3',
  '.inf',
  'true',
  'False',
  'null',
  '~',
  'yes',
  'no',
  'on',
  'off',
  'y',
  'N',
  '<<',
  '2001-12-14',
  '12:30',
  '1_000',
  'é',
  'ж',
  '中文',
  '🎉',
  '👩‍👩‍👧',
  '\t',
  'a\tb',
  '\u00a0',
  '\u2028',
  '\u0085',
  '\ufeff',
  '\u0007',
  '\r\n',
  '\r',
  'a\r\nb'
]
const textArb = fc
  .array(fc.oneof(fc.constantFrom(...TRICKY), fc.string({ unit: 'binary', maxLength: 12 })), { maxLength: 6 })
  .map((parts) => parts.join(''))
  .filter((s) => !s.includes('\u0000'))

const nameArb = fc
  .array(fc.stringMatching(/^[a-z0-9]{1,10}$/), { minLength: 1, maxLength: 6 })
  .map((parts) => parts.join('-'))
  .filter((n) => n.length <= SKILL_NAME_MAX)
const descriptionArb = textArb.filter((d) => d.trim() !== '' && [...d.trim()].length <= SKILL_DESCRIPTION_MAX)
const toolArb = fc
  .oneof(
    fc.constantFrom('Read', 'Bash(git:*)', 'mcp__github__create_issue', '#', '---', ':', '1.0', 'true', '🎉'),
    fc.string({ unit: 'binary', minLength: 1, maxLength: 10 })
  )
  .filter((tool) => !/\s/.test(tool) && !tool.includes('\u0000'))
// the body as a file keeps it: what renderSkillMd writes and parseSkillMd reads
const instructionsArb = fc
  .array(fc.oneof(fc.constantFrom('---', '...', '# Title', '', '  indented', '- item', 'name: x', '---js'), textArb), {
    maxLength: 8
  })
  .map((lines) =>
    lines
      .join('\n')
      .replace(/\r\n?/g, '\n')
      .replace(/^(?:[ \t]*\n)+/, '')
      .trimEnd()
  )
const skillArb: fc.Arbitrary<SkillFields> = fc.record(
  {
    name: nameArb,
    description: descriptionArb,
    instructions: instructionsArb,
    license: fc.option(textArb, { nil: null }),
    compatibility: fc.option(
      textArb.filter((c) => [...c].length <= SKILL_COMPATIBILITY_MAX),
      { nil: null }
    ),
    allowedTools: fc.array(toolArb, { maxLength: 5 }),
    metadata: fc.dictionary(fc.oneof(fc.constantFrom(...TRICKY), textArb), textArb, {
      maxKeys: 5,
      noNullPrototype: true
    })
  },
  { noNullPrototype: true }
)

t.test('round trip: parseSkillMd(renderSkillMd(s)) is s for every valid s', async (t) => {
  fc.assert(
    fc.property(skillArb, (skill) => {
      deepStrictEqual(checkSkillFields(skill), [], 'the generated skill is valid')
      const text = renderSkillMd(skill)
      deepStrictEqual(parseSkillMd(text), { ok: true, skill }, text)
      // a file that went through a Windows editor reads the same, body aside
      const crlf = parseSkillMd(text.replace(/\n/g, '\r\n'))
      deepStrictEqual(crlf.ok, true)
    }),
    { numRuns: 500, seed: Number(process.env.SKILL_MD_SEED ?? 20261123) }
  )
  t.pass('500 generated skills')

  const tricky: SkillFields = {
    name: 'a-1',
    description: '  Use when: you need X # not a comment\n---\nsecond line 🎉  ',
    instructions: '---\nname: evil\n---\n\n...\n  indented',
    license: "it's MIT",
    compatibility: '- needs: git\n',
    allowedTools: ['Bash(git:*)', '#', '---'],
    metadata: { ['__proto__']: 'data', 'a: b': '- x', version: '1.0', '': '', 'multi\nline': '\n' }
  }
  t.strictSame(parseSkillMd(renderSkillMd(tricky)), { ok: true, skill: tricky })

  // the last value before the closing fence, written as a kept block (`|+`): its blank lines count
  const kept: SkillFields = { ...SKILL, metadata: { last: 'x\n...\n\n' } }
  t.match(renderSkillMd(kept), /last: \|\+\n/)
  t.strictSame(parseSkillMd(renderSkillMd(kept)), { ok: true, skill: kept })
})
