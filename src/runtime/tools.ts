import { Type, type Static, type TSchema } from 'typebox'
import { StrictObject } from '../../schemas/common.js'
import type { ToolMode } from './tables.js'
import { TOOL_NAMES } from '../../schemas/runtime.js'

/**
 * The agent's tools: argument schemas (JSON Schema, checked before anything runs) and
 * their definitions in the OpenAI `tools` format, which the openai engine sends as is.
 */
export const ShellArgs = StrictObject({
  command: Type.String({
    minLength: 1,
    maxLength: 16_384,
    description: 'a shell command line, run with /bin/sh -c in the workspace'
  }),
  timeoutSeconds: Type.Optional(
    Type.Integer({ minimum: 1, maximum: 3600, description: 'wall-clock limit (capped by the server)' })
  )
})
export const ReadFileArgs = StrictObject({
  path: Type.String({ minLength: 1, maxLength: 4096, description: 'a path relative to the workspace' })
})
export const WriteFileArgs = StrictObject({
  path: Type.String({
    minLength: 1,
    maxLength: 4096,
    description: 'a path relative to the workspace; parent folders are created'
  }),
  content: Type.String({ description: 'the whole new content (UTF-8)' })
})
export const ListFilesArgs = StrictObject({
  path: Type.Optional(
    Type.String({
      maxLength: 4096,
      description: 'a folder relative to the workspace; empty or absent for the workspace itself'
    })
  )
})
const SearchMode = Type.Optional(
  Type.Union([Type.Literal('hybrid'), Type.Literal('semantic'), Type.Literal('fulltext')], {
    description: 'hybrid (default): by words and meaning; semantic: meaning only; fulltext: words only'
  })
)
export const MemorySearchArgs = StrictObject({
  query: Type.String({ minLength: 1, maxLength: 2000, description: 'what to look for' }),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, description: 'at most this many facts (default 10)' })),
  mode: SearchMode
})
export const WriteArtifactArgs = StrictObject({
  name: Type.String({ minLength: 1, maxLength: 255, description: 'the file name, such as report.md' }),
  content: Type.String({ description: 'the whole content (UTF-8 text)' }),
  contentType: Type.Optional(
    Type.String({ minLength: 3, maxLength: 255, description: 'a text media type (default text/markdown)' })
  )
})

export const KnowledgeSearchArgs = StrictObject({
  query: Type.String({
    minLength: 1,
    maxLength: 500,
    description: 'a web search query: words, "quoted phrases", or, -excluded'
  }),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, description: 'at most this many hits (default 10)' })),
  mode: SearchMode
})
export const ProposeKnowledgeArgs = StrictObject({
  title: Type.String({ minLength: 1, maxLength: 300, description: 'a short title' }),
  body: Type.String({ minLength: 1, maxLength: 100_000, description: 'the knowledge, in Markdown' }),
  tags: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 32, description: 'labels' })
  ),
  targetRecordId: Type.Optional(
    Type.String({ minLength: 1, maxLength: 64, description: 'the record this would revise, when it is a correction' })
  )
})

export const ProposeSkillArgs = StrictObject({
  skillMd: Type.String({
    minLength: 1,
    maxLength: 262_144,
    description:
      'a whole SKILL.md: YAML front matter (name, description, ...) between --- lines, then Markdown instructions'
  }),
  skillId: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 64,
      description: 'the skill this changes; without it, the skill with the same name, or a new one'
    })
  )
})

export const RememberArgs = StrictObject({
  content: Type.String({
    minLength: 1,
    maxLength: 4000,
    pattern: '\\S',
    description: 'one durable fact, in a sentence that stands on its own'
  }),
  scope: Type.Optional(
    Type.Union([Type.Literal('org'), Type.Literal('personal')], {
      description: 'org (default): for the whole organization; personal: for the person the run works for'
    })
  )
})

export const TOOLS = {
  shell: {
    schema: ShellArgs,
    defaultMode: 'approve',
    description:
      "Run a shell command in the thread's sandboxed workspace. Returns the exit code, stdout and stderr (cut when long)."
  },
  read_file: {
    schema: ReadFileArgs,
    defaultMode: 'auto',
    description: 'Read a UTF-8 text file from the workspace.'
  },
  write_file: {
    schema: WriteFileArgs,
    defaultMode: 'approve',
    description: 'Create or replace a text file in the workspace.'
  },
  list_files: {
    schema: ListFilesArgs,
    defaultMode: 'auto',
    description: 'List a folder of the workspace: names, types and sizes.'
  },
  memory_search: {
    schema: MemorySearchArgs,
    defaultMode: 'auto',
    description: "Search the organization's memory (facts remembered from earlier runs)."
  },
  write_artifact: {
    schema: WriteArtifactArgs,
    defaultMode: 'auto',
    description:
      'Save a text file as an artifact of this run, kept and shown to the people of the organization; saving the same name again makes a new version.'
  },
  knowledge_search: {
    schema: KnowledgeSearchArgs,
    defaultMode: 'auto',
    description:
      "Search the organization's knowledge base (records and uploaded documents). Returns titles and snippets, best first."
  },
  propose_knowledge: {
    schema: ProposeKnowledgeArgs,
    defaultMode: 'auto',
    description:
      "Propose a piece of knowledge for the organization's knowledge base. It becomes a draft that a person approves or rejects."
  },
  propose_skill: {
    schema: ProposeSkillArgs,
    defaultMode: 'auto',
    description:
      'Propose a skill (an Agent Skills SKILL.md) for the organization, new or as a change of an existing one. A person accepts or rejects it; the answer says why when the file is invalid.'
  },
  remember: {
    schema: RememberArgs,
    defaultMode: 'auto',
    description:
      "Remember a durable fact for later runs (a preference, a decision, how something works). It is kept in the organization's memory, or the person's own with scope personal, when this run ends."
  }
} as const satisfies Record<
  (typeof TOOL_NAMES)[number],
  { schema: TSchema; defaultMode: ToolMode; description: string }
>

export type ToolName = keyof typeof TOOLS
export { TOOL_NAMES }
export type ToolArgs = {
  shell: Static<typeof ShellArgs>
  read_file: Static<typeof ReadFileArgs>
  write_file: Static<typeof WriteFileArgs>
  list_files: Static<typeof ListFilesArgs>
  memory_search: Static<typeof MemorySearchArgs>
  write_artifact: Static<typeof WriteArtifactArgs>
  knowledge_search: Static<typeof KnowledgeSearchArgs>
  propose_knowledge: Static<typeof ProposeKnowledgeArgs>
  propose_skill: Static<typeof ProposeSkillArgs>
  remember: Static<typeof RememberArgs>
}

export function isToolName(name: string): name is ToolName {
  return Object.hasOwn(TOOLS, name)
}

export interface OpenAiToolDefinition {
  type: 'function'
  function: { name: string; description: string; parameters: Record<string, unknown> }
}

/** The tools in the OpenAI chat-completions `tools` format (plain JSON, no TypeBox symbols). */
export function toolDefinitions(): OpenAiToolDefinition[] {
  return TOOL_NAMES.map((name) => ({
    type: 'function',
    function: {
      name,
      description: TOOLS[name].description,
      parameters: JSON.parse(JSON.stringify(TOOLS[name].schema)) as Record<string, unknown>
    }
  }))
}
