// The wire types of the admin pages (models, access, agent settings, knowledge, skills, automations): the server's own
// TypeBox schemas, imported for their types only, as in api.ts.
import type { Static } from 'typebox'
import type {
  ApiKey as ApiKeySchema,
  ApiKeyList,
  MemberList,
  MintedKey as MintedKeySchema
} from '../../schemas/auth.js'
import type { IntegrationList } from '../../schemas/integrations.js'
import type { McpServer as McpServerSchema, McpServerPage } from '../../schemas/mcp.js'
import type {
  DefaultModel as DefaultModelSchema,
  Provider as ProviderSchema,
  ProviderEnvelope,
  ProviderPage
} from '../../schemas/providers.js'
import type { EmbeddingModelInfo } from '../../schemas/retrieval.js'
import type { ToolPolicyList, ToolMode as ToolModeSchema } from '../../schemas/runtime.js'
import type { SecretPage } from '../../schemas/secrets.js'
import type {
  AutomationEnvelope,
  AutomationPage,
  Automation as AutomationSchema,
  AutomationTarget
} from '../../schemas/automations.js'
import type {
  DocumentEnvelope,
  DocumentPage,
  KnowledgeDocument,
  KnowledgeRecord,
  RecordEnvelope,
  RecordPage,
  SearchResult
} from '../../schemas/knowledge.js'
import type { Skill as SkillSchema, SkillEnvelope, SkillPage } from '../../schemas/skills.js'
import { ApiError } from './api.js'

export type Provider = Static<typeof ProviderSchema>
export type Providers = Static<typeof ProviderPage>
export type ProviderReply = Static<typeof ProviderEnvelope>
export type DefaultModel = Static<typeof DefaultModelSchema>
export type EmbeddingModel = Static<typeof EmbeddingModelInfo>
export type ApiKey = Static<typeof ApiKeySchema>
export type ApiKeys = Static<typeof ApiKeyList>
export type MintedKey = Static<typeof MintedKeySchema>
export type Members = Static<typeof MemberList>
export type ToolPolicies = Static<typeof ToolPolicyList>
export type ToolMode = Static<typeof ToolModeSchema>
export type McpServer = Static<typeof McpServerSchema>
export type McpServers = Static<typeof McpServerPage>
export type Secrets = Static<typeof SecretPage>
export type Integrations = Static<typeof IntegrationList>

/** The policy modes a tool may have, held to the server's list both ways (as CAPTURE_STATES in api.ts). */
export const TOOL_MODE_CHOICES = ['auto', 'approve', 'deny'] as const satisfies readonly ToolMode[]
const everyMode: Exclude<ToolMode, (typeof TOOL_MODE_CHOICES)[number]> extends never ? true : never = true
void everyMode

const release = document.querySelector<HTMLMetaElement>('meta[name="cairn-release"]')?.content ?? ''

/**
 * One message to a model through `POST /api/chat` (its answer streams as server-sent events):
 * the whole answer, or the refusal as an ApiError (a model that cannot be reached is a 503).
 */
export async function chatOnce(model: string, message: string): Promise<string> {
  let res: Response
  try {
    res = await fetch('/api/chat', {
      method: 'POST',
      credentials: 'same-origin',
      headers: {
        accept: 'text/event-stream',
        'content-type': 'application/json',
        ...(release !== '' && !release.includes('%') ? { 'x-service-client-release': release } : {})
      },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: message }] })
    })
  } catch {
    throw new ApiError(0, 'network', 'The server could not be reached. Check your connection and try again.')
  }
  const text = await res.text()
  if (!res.ok) {
    let err: { error?: string; message?: string } = {}
    try {
      err = JSON.parse(text) as typeof err
    } catch {
      // not JSON: described by the status
    }
    throw new ApiError(
      res.status,
      err.error ?? `http_${res.status}`,
      err.message ?? `The server answered ${res.status}.`
    )
  }
  let answer = ''
  for (const frame of text.split(/\r?\n\r?\n/)) {
    const event = /^event: (.*)$/m.exec(frame)?.[1]
    const data = frame
      .split(/\r?\n/)
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trimStart())
      .join('\n')
    if (data === '') continue
    let parsed: { text?: string; message?: string; error?: string } = {}
    try {
      parsed = JSON.parse(data) as typeof parsed
    } catch {
      continue
    }
    if (event === 'token' && typeof parsed.text === 'string') answer += parsed.text
    if (event === 'error') throw new ApiError(502, parsed.error ?? 'model_error', parsed.message ?? 'The model failed.')
  }
  return answer
}

export type Knowledge = Static<typeof KnowledgeRecord>
export type KnowledgePage = Static<typeof RecordPage>
export type KnowledgeReply = Static<typeof RecordEnvelope>
export type KnowledgeSearch = Static<typeof SearchResult>
export type KnowledgeHit = KnowledgeSearch['items'][number]
export type Doc = Static<typeof KnowledgeDocument>
export type DocPage = Static<typeof DocumentPage>
export type DocReply = Static<typeof DocumentEnvelope>

export type Skill = Static<typeof SkillSchema>
export type Skills = Static<typeof SkillPage>
export type SkillReply = Static<typeof SkillEnvelope>

export type Automation = Static<typeof AutomationSchema>
export type Automations = Static<typeof AutomationPage>
export type AutomationReply = Static<typeof AutomationEnvelope>
export type Target = Static<typeof AutomationTarget>
