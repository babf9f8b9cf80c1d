import { Type } from 'typebox'
import { IsoDate, LiteralUnion, named, Nullable, StrictObject } from './common.js'

export const USAGE_GROUPS = ['engine', 'model', 'user'] as const
export const USAGE_MAX_DAYS = 366

const LocalDate = Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', description: 'a local date of `tz`, YYYY-MM-DD' })

export const UsageQuery = StrictObject({
  from: Type.Optional({ ...LocalDate, description: 'first local day, included (default: 29 days before `to`)' }),
  to: Type.Optional({ ...LocalDate, description: 'last local day, included (default: today in `tz`)' }),
  tz: Type.Optional(
    Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone the days are counted in (default UTC)' })
  ),
  groupBy: Type.Optional(
    Type.String({
      pattern: '^(engine|model|user)(,(engine|model|user))*$',
      description: 'comma-separated: any of engine, model, user'
    })
  )
})

const Counts = {
  runs: Type.Integer({ description: 'runs that finished (succeeded, failed or cancelled)' }),
  succeeded: Type.Integer(),
  failed: Type.Integer(),
  inputTokens: Type.Integer({ description: 'prompt tokens the engines reported' }),
  outputTokens: Type.Integer({ description: 'completion tokens the engines reported' }),
  durationMs: Type.Integer({ description: 'time the runs spent executing, started to finished' })
}

export const UsageBucket = named(
  'UsageBucket',
  Type.Object(
    {
      date: Type.String({ description: 'the local day of `tz`, YYYY-MM-DD' }),
      engine: Nullable(Type.String({ description: 'null unless grouped by engine' })),
      model: Nullable(Type.String({ description: 'null unless grouped by model (or the runs named none)' })),
      userId: Nullable(
        Type.String({
          description: 'null unless grouped by user (or the runs had none: keys, the dev org, automations)'
        })
      ),
      ...Counts
    },
    { description: 'one local day (23, 24 or 25 hours) of one group' }
  )
)

export const UsageTotals = named('UsageTotals', Type.Object(Counts))

export const UsageReport = named(
  'UsageReport',
  Type.Object({
    buckets: Type.Array(UsageBucket, {
      description: 'every day of the range for every group seen in it (zero-filled), by date then group'
    }),
    totals: UsageTotals
  })
)

const RECENT_KINDS = ['run', 'record', 'document', 'artifact', 'skill', 'task'] as const

export const Dashboard = named(
  'Dashboard',
  Type.Object(
    {
      runs: Type.Object({
        total: Type.Integer(),
        byStatus: Type.Object({
          queued: Type.Integer(),
          running: Type.Integer(),
          requires_action: Type.Integer({ description: 'waiting for people to decide tool calls' }),
          succeeded: Type.Integer(),
          failed: Type.Integer(),
          cancelled: Type.Integer()
        }),
        last24h: Type.Integer({ description: 'runs created in the last 24 hours' })
      }),
      activeRuns: Type.Integer({ description: 'runs queued, running or waiting for approval now' }),
      memory: Type.Object({
        items: Type.Integer({ description: "facts in the org's pools (postgres backend)" }),
        pendingCaptures: Type.Integer(),
        deadCaptures: Type.Integer(),
        orphans: Type.Integer({ description: 'captures whose delivery lease expired mid-delivery' })
      }),
      knowledge: Type.Object({ records: Type.Integer(), documents: Type.Integer() }),
      automations: Type.Object({ enabled: Type.Integer(), nextFireAt: Nullable(IsoDate) }),
      recent: Type.Array(
        Type.Object({
          kind: LiteralUnion(RECENT_KINDS),
          id: Type.String(),
          title: Type.String(),
          at: IsoDate
        }),
        { description: 'the newest changes across runs, records, documents, artifacts, skills and tasks (at most 10)' }
      )
    },
    { description: 'the org at a glance' }
  )
)
