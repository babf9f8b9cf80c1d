import { Type } from 'typebox'
import { CreatedBy, Id, IsoDate, LiteralUnion, named, Nullable, Page, PageQuery, StrictObject } from './common.js'
import { AgentOptions } from './runs.js'

/** What a ticks missed while no instance ran become. */
export const CATCH_UPS = ['latest', 'skip'] as const

const Engine = Type.String({ minLength: 1, maxLength: 64, pattern: '^[a-z0-9_-]+$' })
const Model = Type.String({ minLength: 1, maxLength: 200 })
const Input = Type.String({ maxLength: 100_000 })

export const PromptTarget = named(
  'AutomationPromptTarget',
  StrictObject({
    prompt: Type.String({ minLength: 1, maxLength: 100_000 }),
    engine: Type.Optional(Engine),
    model: Type.Optional(Model),
    ...AgentOptions
  })
)
export const SkillTarget = named('AutomationSkillTarget', StrictObject({ skillId: Id, input: Type.Optional(Input) }))
export const PlaybookTarget = named(
  'AutomationPlaybookTarget',
  StrictObject({ playbookId: Id, input: Type.Optional(Input) })
)
export const AutomationTarget = Type.Union([PromptTarget, SkillTarget, PlaybookTarget], {
  description: 'a prompt, a skill run or a playbook run'
})

const Name = Type.String({ minLength: 1, maxLength: 200, pattern: '\\S' })
const CronText = Type.String({
  minLength: 1,
  maxLength: 200,
  description:
    'five-field cron (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly'
})
const TimeZone = Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone the cron is read in' })
export const CatchUp = LiteralUnion(CATCH_UPS, {
  description: 'ticks missed while no instance ran: latest fires one run for the latest, skip fires none'
})

export const Automation = named(
  'Automation',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    cron: Type.String(),
    timezone: Type.String(),
    target: AutomationTarget,
    enabled: Type.Boolean(),
    catchUp: CatchUp,
    description: Type.String({ description: 'the cron in words' }),
    nextRuns: Type.Array(IsoDate, { description: 'the next five fire times (UTC); empty while disabled' }),
    lastFiredAt: Nullable(IsoDate),
    lastRunId: Nullable(Type.String()),
    createdAt: IsoDate,
    updatedAt: IsoDate,
    createdBy: CreatedBy
  })
)

export const CreateAutomationBody = named(
  'CreateAutomationRequest',
  StrictObject({
    name: Name,
    cron: CronText,
    timezone: Type.Optional(TimeZone),
    target: AutomationTarget,
    enabled: Type.Optional(Type.Boolean()),
    catchUp: Type.Optional(CatchUp)
  })
)
export const UpdateAutomationBody = named(
  'UpdateAutomationRequest',
  StrictObject({
    name: Type.Optional(Name),
    cron: Type.Optional(CronText),
    timezone: Type.Optional(TimeZone),
    target: Type.Optional(AutomationTarget),
    enabled: Type.Optional(Type.Boolean()),
    catchUp: Type.Optional(CatchUp)
  })
)
export const AutomationEnvelope = Type.Object({ automation: Automation })
export const AutomationPage = named('AutomationPage', Page(Automation))
export const ListAutomationsQuery = StrictObject({ ...PageQuery })

export const AutomationFire = named(
  'AutomationFire',
  Type.Object({
    scheduledFor: IsoDate,
    firedAt: IsoDate,
    runId: Type.String()
  })
)
export const AutomationFirePage = named('AutomationFirePage', Page(AutomationFire))
