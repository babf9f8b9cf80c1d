// The wire types of the admin's knowledge, skills and automations pages: the server's own
// TypeBox schemas (schemas/), imported for their types only (erased by the build).
import type { Static } from 'typebox'
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
