import { Type } from 'typebox'
import { CreatedBy, IsoDate, LiteralUnion, named, Nullable, Page, PageQuery, StrictObject } from './common.js'

/** A model id as runs name it (the same bounds as `POST /api/runs {model}`). */
export const ModelId = Type.String({
  minLength: 1,
  maxLength: 200,
  pattern: '^\\S(.*\\S)?$',
  description: 'a model id the provider serves'
})
export const MAX_PROVIDER_MODELS = 500
/** the protocols a provider may speak */
export const PROVIDER_KINDS = ['openai', 'anthropic'] as const
const KIND_TEXT =
  'openai: any OpenAI-compatible chat-completions API (base URL …/v1); anthropic: the Anthropic Messages API (base URL without /v1, e.g. https://api.anthropic.com)'
const ProviderKind = LiteralUnion(PROVIDER_KINDS, { description: KIND_TEXT })

export const Provider = named(
  'Provider',
  Type.Object(
    {
      id: Type.String(),
      name: Type.String(),
      kind: ProviderKind,
      baseUrl: Type.String({ description: 'the API base, without a trailing slash' }),
      models: Type.Array(Type.String(), {
        description:
          'the model ids runs may name: the ones given at creation, else the ones its /models listed at the last successful check'
      }),
      ready: Type.Boolean({
        description: 'the last check succeeded: its models are offered to runs and listed by GET /api/models'
      }),
      lastCheckedAt: Nullable(IsoDate),
      lastError: Nullable(
        Type.String({ description: 'why the last check failed, as a sentence; null when it succeeded' })
      ),
      createdAt: IsoDate,
      updatedAt: IsoDate,
      createdBy: CreatedBy
    },
    {
      description:
        'a model provider of the org (OpenAI-compatible or Anthropic); its API key is kept as a secret and never returned'
    }
  )
)

export const CreateProviderBody = named(
  'CreateProviderRequest',
  StrictObject({
    name: Type.String({ minLength: 1, maxLength: 100, pattern: '\\S', description: 'unique in the org' }),
    kind: Type.Optional(LiteralUnion(PROVIDER_KINDS, { description: `${KIND_TEXT}; openai when omitted` })),
    baseUrl: Type.String({
      minLength: 1,
      maxLength: 2048,
      pattern: '^[Hh][Tt][Tt][Pp][Ss]?://',
      description:
        'http(s) URL of the API: for openai e.g. https://api.example.com/v1, for anthropic e.g. https://api.anthropic.com; its host must not resolve to a link-local, metadata, loopback or private address (the last two allowed with PROVIDER_ALLOW_PRIVATE=true)'
    }),
    apiKey: Type.String({
      minLength: 1,
      maxLength: 8192,
      // it travels in an HTTP header, which carries visible ASCII only: a pasted curly quote or
      // space would fail every call
      pattern: '^[\\x21-\\x7E]+$',
      description:
        'visible ASCII characters only (no spaces); sent as `Authorization: Bearer` (openai) or `x-api-key` (anthropic); sealed as a secret, never returned'
    }),
    models: Type.Optional(
      Type.Array(ModelId, {
        minItems: 1,
        maxItems: MAX_PROVIDER_MODELS,
        uniqueItems: true,
        description: 'the models to offer; omitted: the ones its /models lists'
      })
    )
  })
)

export const ProviderEnvelope = Type.Object({ provider: Provider })
export const ProviderPage = named('ProviderPage', Page(Provider))
export const ListProvidersQuery = StrictObject({ ...PageQuery })

export const ModelEntry = named(
  'ModelEntry',
  Type.Object(
    {
      id: Type.String({ description: 'what a run names as `model`' }),
      engine: Type.String({
        description: "the engine that runs it (a provider's kind for its models: `openai` or `anthropic`)"
      }),
      providerId: Nullable(
        Type.String({ description: "the org's provider serving it; null for the deployment's own models" })
      ),
      default: Type.Boolean({ description: "the org's default model: what a run naming no model gets" })
    },
    { description: "a model ready for the caller's org" }
  )
)

export const DEFAULT_MODEL_SOURCES = ['org', 'deployment', 'provider', 'echo'] as const
export const DefaultModel = named(
  'DefaultModel',
  Type.Object({
    model: Type.String({
      description: 'what a run, chat, skill, playbook, task, automation or Slack run naming no model uses'
    }),
    source: LiteralUnion(DEFAULT_MODEL_SOURCES, {
      description:
        "org: an admin chose it; deployment: the server's first configured model; provider: the org's providers' first model; echo: neither the server nor the org configures any model (a configured model that is down is still the default: its runs fail, saying so)"
    })
  })
)
export const SetDefaultModelBody = named(
  'SetDefaultModelRequest',
  StrictObject({
    model: Nullable(
      Type.String({ minLength: 1, maxLength: 200, description: 'a model of GET /api/models; null forgets the choice' })
    )
  })
)
export const SetDefaultModelReply = Type.Object({ model: Nullable(Type.String()) })
export const ModelList = named('ModelList', Type.Object({ items: Type.Array(ModelEntry) }))
