import { Type } from 'typebox'
import {
  CreatedBy,
  Id,
  IdParams,
  IsoDate,
  LiteralUnion,
  named,
  Nullable,
  Page,
  PageQuery,
  StrictObject
} from './common.js'
import { AgentOptions } from './runs.js'

export const PROPOSAL_STATES = ['open', 'accepted', 'rejected'] as const

/** A SKILL.md as text: YAML front matter between `---` lines, then Markdown instructions. */
const SkillMd = Type.String({ minLength: 1, maxLength: 262_144, description: 'a whole SKILL.md file' })
const Instructions = Type.String({ maxLength: 200_000, description: 'Markdown: the body of the SKILL.md' })
const Engine = Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9_-]+$' })
const Model = Type.String({ minLength: 1, maxLength: 200 })
const RunInput = Type.String({ maxLength: 100_000, description: 'appended to the instructions after a blank line' })

export const SkillSource = named(
  'SkillSource',
  Type.Union([
    Type.Object({ kind: Type.Literal('manual') }),
    Type.Object({
      kind: Type.Literal('github'),
      repo: Type.String(),
      path: Type.String(),
      ref: Type.String(),
      commit: Type.String()
    })
  ])
)

export const Skill = named(
  'Skill',
  Type.Object({
    id: Type.String(),
    name: Type.String({
      description: '1 to 64 of [a-z0-9-], no leading, trailing or double hyphen; unique in the org'
    }),
    description: Type.String(),
    instructions: Type.String(),
    license: Nullable(Type.String()),
    compatibility: Nullable(Type.String()),
    allowedTools: Type.Array(Type.String()),
    metadata: Type.Record(Type.String(), Type.String()),
    version: Type.Integer({ minimum: 1 }),
    warnings: Type.Array(Type.String(), {
      description: 'sentences about allowed-tools names runs of this skill do not get as written'
    }),
    source: SkillSource,
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)

/**
 * The fields a skill is made of; checked by the Agent Skills rules in the handler, so every problem is reported at
 * once.
 */
const skillFields = {
  name: Type.Optional(Type.String({ maxLength: 1000 })),
  description: Type.Optional(Type.String({ maxLength: 10_000 })),
  instructions: Type.Optional(Instructions),
  license: Type.Optional(Nullable(Type.String({ maxLength: 1000 }))),
  compatibility: Type.Optional(Nullable(Type.String({ maxLength: 10_000 }))),
  allowedTools: Type.Optional(
    Type.Array(Type.String({ minLength: 1, maxLength: 200, pattern: '^\\S+$' }), { maxItems: 100 })
  ),
  metadata: Type.Optional(
    Type.Record(Type.String({ maxLength: 200 }), Type.String({ maxLength: 10_000 }), { maxProperties: 100 })
  )
}

export const CreateSkillBody = named(
  'CreateSkillRequest',
  StrictObject(
    {
      skillMd: Type.Optional(SkillMd),
      ...skillFields
    },
    { description: 'either `skillMd` (the file) or the fields (`name` and `description` at least), not both' }
  )
)

export const UpdateSkillBody = named(
  'UpdateSkillRequest',
  StrictObject(
    {
      skillMd: Type.Optional(SkillMd),
      ...skillFields,
      version: Type.Integer({
        minimum: 1,
        maximum: 2_147_483_647,
        description: 'the version this change is based on; a stale one is 409'
      })
    },
    { description: '`skillMd` replaces the whole skill; otherwise the fields sent replace theirs' }
  )
)

export const RunSkillBody = named(
  'RunSkillRequest',
  StrictObject({
    input: Type.Optional(RunInput),
    rootRunId: Type.Optional(Id),
    engine: Type.Optional(Engine),
    model: Type.Optional(Model),
    ...AgentOptions
  })
)

export const SkillEnvelope = Type.Object({ skill: Skill })
export const SkillPage = named('SkillPage', Page(Skill))
export const ListSkillsQuery = StrictObject({ ...PageQuery })
export { IdParams }

export const ProposalState = LiteralUnion(PROPOSAL_STATES)
export const SkillProposal = named(
  'SkillProposal',
  Type.Object({
    id: Type.String(),
    skillId: Nullable(Type.String({ description: 'the skill it changes; null: a new skill' })),
    baseVersion: Nullable(Type.Integer({ description: 'the skill version it was written against' })),
    skillMd: Type.String(),
    state: ProposalState,
    runId: Nullable(Type.String({ description: 'the run that proposed it' })),
    createdAt: IsoDate,
    createdBy: CreatedBy,
    decidedAt: Nullable(IsoDate),
    decidedBy: Nullable(Type.String())
  })
)
export const CreateProposalBody = named(
  'CreateSkillProposalRequest',
  StrictObject({
    skillMd: SkillMd,
    skillId: Type.Optional(Id),
    baseVersion: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 2_147_483_647, description: "default: the skill's current version" })
    )
  })
)
export const ListProposalsQuery = StrictObject({
  ...PageQuery,
  state: Type.Optional(ProposalState),
  skillId: Type.Optional(Id)
})
export const ProposalEnvelope = Type.Object({ proposal: SkillProposal })
export const ProposalPage = named('SkillProposalPage', Page(SkillProposal))
export const AcceptedProposal = named('AcceptedSkillProposal', Type.Object({ proposal: SkillProposal, skill: Skill }))

export const PlaybookStep = named(
  'PlaybookStep',
  Type.Object({
    skillId: Type.String(),
    input: Type.String()
  })
)
export const Playbook = named(
  'Playbook',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    description: Type.String(),
    steps: Type.Array(PlaybookStep),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)
const StepInput = StrictObject({ skillId: Id, input: Type.Optional(Type.String({ maxLength: 100_000 })) })
const Steps = Type.Array(StepInput, { minItems: 1, maxItems: 50 })
const PlaybookName = Type.String({ minLength: 1, maxLength: 200, pattern: '\\S' })
const PlaybookDescription = Type.String({ maxLength: 10_000 })
export const CreatePlaybookBody = named(
  'CreatePlaybookRequest',
  StrictObject({
    name: PlaybookName,
    description: Type.Optional(PlaybookDescription),
    steps: Steps
  })
)
export const UpdatePlaybookBody = named(
  'UpdatePlaybookRequest',
  StrictObject({
    name: Type.Optional(PlaybookName),
    description: Type.Optional(PlaybookDescription),
    steps: Type.Optional(Steps)
  })
)
export const RunPlaybookBody = named(
  'RunPlaybookRequest',
  StrictObject({
    input: Type.Optional(RunInput),
    engine: Type.Optional(Engine),
    model: Type.Optional(Model),
    /**
     * every step takes them (instructions after the step's skill's, tools cut to its allowed-tools); attachments go to
     * the thread's workspace with the first step
     */
    ...AgentOptions
  })
)
export const PlaybookEnvelope = Type.Object({ playbook: Playbook })
export const PlaybookPage = named('PlaybookPage', Page(Playbook))
