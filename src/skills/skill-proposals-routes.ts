import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses } from '../../schemas/common.js'
import {
  AcceptedProposal,
  CreateProposalBody,
  IdParams,
  ListProposalsQuery,
  ProposalEnvelope,
  ProposalPage
} from '../../schemas/skills.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { acceptProposal, insertProposal, listProposals, proposalToWire, rejectProposal } from './proposals-repo.js'
import { targetOf } from './service.js'
import { noSkill, refusal, skillFromFile } from './skill-requests.js'
import { skillToWire } from './skills-repo.js'

const SKILLS = ['skills']

/** Proposed skills and changes to skills, accepted or rejected: /skills/proposals. */
const skillProposalsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/skills/proposals',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createSkillProposal',
        tags: SKILLS,
        summary:
          'Propose a SKILL.md: a new skill, or a change of `skillId` (or of the skill with its name) against `baseVersion`',
        description:
          'Records a proposed SKILL.md as an open proposal: a new skill, or a change to an existing skill against the version it was written from.',
        body: CreateProposalBody,
        response: { 201: ProposalEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { skillMd, skillId, baseVersion } = request.body
      const fields = skillFromFile(skillMd)
      const target = await targetOf(app.db, principal.orgId, skillId, fields.name)
      if (target === 'missing') throw noSkill()
      const proposal = await insertProposal(app.db, principal.orgId, {
        skillMd,
        skillId: target?.id ?? null,
        baseVersion: target ? (baseVersion ?? target.version) : null,
        runId: null,
        createdBy: realUserId(principal)
      })
      return reply.code(201).send({ proposal: proposalToWire(proposal) })
    }
  )

  app.get(
    '/skills/proposals',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listSkillProposals',
        tags: SKILLS,
        summary: 'Proposals, newest first; `state` and `skillId` filter',
        description: 'Pages through skill proposals, newest first, optionally by state or skill.',
        querystring: ListProposalsQuery,
        response: { 200: ProposalPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const q = request.query
      const page = await listProposals(app.db, orgId, {
        state: q.state,
        skillId: q.skillId,
        limit: q.limit ?? 50,
        cursor: q.cursor
      })
      return { items: page.items.map(proposalToWire), nextCursor: page.nextCursor }
    }
  )

  app.post(
    '/skills/proposals/:id/accept',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'acceptSkillProposal',
        tags: SKILLS,
        summary:
          "Accept an open proposal: the skill's next version (409 when it moved past `baseVersion`) or a new skill",
        description:
          "Applies an open proposal: the skill's next version, or a new skill, refused with 409 when the skill moved past the proposal's base version.",
        params: IdParams,
        response: { 200: AcceptedProposal, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const result = await acceptProposal(app.db, principal.orgId, request.params.id, realUserId(principal))
      if ('refused' in result) throw refusal(result)
      return { proposal: proposalToWire(result.proposal), skill: skillToWire(result.skill) }
    }
  )

  app.post(
    '/skills/proposals/:id/reject',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'rejectSkillProposal',
        tags: SKILLS,
        summary: 'Reject an open proposal; a run does not propose the same content again',
        description:
          'Closes an open proposal without changing the skill, and remembers its content so runs do not propose it again.',
        params: IdParams,
        response: { 200: ProposalEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const result = await rejectProposal(app.db, principal.orgId, request.params.id, realUserId(principal))
      if ('refused' in result) throw refusal(result)
      return { proposal: proposalToWire(result) }
    }
  )
}

export default skillProposalsRoutes
