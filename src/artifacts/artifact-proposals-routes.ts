import { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { createTwoFilesPatch } from 'diff'
import type { FastifyReply } from 'fastify'
import { text } from 'node:stream/consumers'
import { conflict, notFound, payloadTooLarge } from '../../plugins/errors.js'
import {
  AcceptedProposal,
  CreateProposalBody,
  DiffResponse,
  IdParams,
  ListProposalsQuery,
  ProposalEnvelope,
  ProposalPage,
  ProposalParams
} from '../../schemas/artifacts.js'
import { errorResponses } from '../../schemas/common.js'
import { principalOf, realUserId } from '../auth/principal.js'
import {
  artifactToWire,
  createProposal,
  decideProposal,
  getProposal,
  getVersion,
  listProposals,
  proposalToWire
} from './artifacts-repo.js'
import { storeBody } from './receive.js'
import { artifactOf } from './route-helpers.js'

/** Proposed changes to an artifact, their diffs and decisions: /artifacts/:id/proposals. */
const artifactProposalsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { store, maxBytes } = app.artifacts
  const target = { db: app.db, store, maxBytes }
  const storeBodyOf = (reply: FastifyReply, orgId: string, body: Readable) => storeBody(target, reply, orgId, body)

  app.post(
    '/artifacts/:id/proposals',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createArtifactProposal',
        tags: ['artifacts'],
        summary: 'Suggest a new version (text) against a base version',
        description:
          'Records a suggested new text for an artifact against the version it was written from, to be accepted or rejected later.',
        params: IdParams,
        body: CreateProposalBody,
        response: { 201: ProposalEnvelope, ...errorResponses(404, 413, 507) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { orgId } = principal
      const a = await artifactOf(app.db, orgId, request.params.id)
      const { content, baseVersion, summary } = request.body
      if (baseVersion > a.version || !(await getVersion(app.db, orgId, a.id, baseVersion)))
        throw conflict(`the artifact has no version ${baseVersion}`)
      if (Buffer.byteLength(content) > maxBytes) throw payloadTooLarge(maxBytes)
      const blob = await storeBodyOf(reply, orgId, Readable.from([Buffer.from(content, 'utf8')]))
      const proposal = await createProposal(app.db, orgId, a.id, {
        baseVersion,
        summary: summary ?? null,
        blob,
        contentType: a.contentType,
        runId: null,
        createdBy: realUserId(principal)
      })
      return reply.code(201).send({ proposal: proposalToWire(proposal) })
    }
  )

  app.get(
    '/artifacts/:id/proposals',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listArtifactProposals',
        tags: ['artifacts'],
        summary: 'Proposals of an artifact, newest first; filter by state',
        description: "Pages through an artifact's proposals, newest first, optionally only those in one state.",
        params: IdParams,
        querystring: ListProposalsQuery,
        response: { 200: ProposalPage, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      await artifactOf(app.db, orgId, request.params.id)
      const q = request.query
      const page = await listProposals(app.db, orgId, request.params.id, {
        limit: q.limit ?? 50,
        cursor: q.cursor,
        state: q.state
      })
      return { items: page.items.map(proposalToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/artifacts/:id/proposals/:pid/diff',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getArtifactProposalDiff',
        tags: ['artifacts'],
        summary: 'A unified diff of the proposal against its base version (text/plain)',
        description:
          "Returns a unified diff between the proposal's text and the version it was based on, as plain text.",
        params: ProposalParams,
        response: { 200: DiffResponse, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const a = await artifactOf(app.db, orgId, request.params.id)
      const proposal = await getProposal(app.db, orgId, a.id, request.params.pid)
      if (!proposal) throw notFound('no such proposal for this artifact')
      const base = await getVersion(app.db, orgId, a.id, proposal.baseVersion)
      const before = base ? await text(await store.read(orgId, base.sha256)) : ''
      const after = await text(await store.read(orgId, proposal.sha256))
      const diff = createTwoFilesPatch(`${a.name}@v${proposal.baseVersion}`, `${a.name}@proposal`, before, after)
      // the diff is stored text of the org's runs and people: a browser opening it treats it
      // as a sandboxed page (no script, no same-origin access) on top of the API's policy
      const policy = reply.getHeader('content-security-policy')
      return reply
        .type('text/plain; charset=utf-8')
        .header('content-security-policy', typeof policy === 'string' && policy ? `${policy}; sandbox` : 'sandbox')
        .send(diff)
    }
  )

  for (const decision of ['accept', 'reject'] as const) {
    app.post(
      `/artifacts/:id/proposals/:pid/${decision}`,
      {
        config: { keyAccess: 'none' },
        schema: {
          operationId: decision === 'accept' ? 'acceptArtifactProposal' : 'rejectArtifactProposal',
          tags: ['artifacts'],
          summary:
            decision === 'accept'
              ? 'Accept: a new version (source `proposal`); 409 when the artifact moved past the base or the proposal is not open'
              : 'Reject an open proposal',
          description:
            decision === 'accept'
              ? "Turns an open proposal into the artifact's next version, provided the artifact has not moved past the proposal's base."
              : 'Closes an open proposal without changing the artifact.',
          params: ProposalParams,
          response: { 200: decision === 'accept' ? AcceptedProposal : ProposalEnvelope, ...errorResponses(404) }
        }
      },
      async (request) => {
        const principal = principalOf(request)
        const { orgId } = principal
        const { id, pid } = request.params as { id: string; pid: string }
        const outcome = await decideProposal(app.db, orgId, id, pid, decision === 'accept', realUserId(principal))
        if (outcome === null) throw notFound('no such proposal for this artifact')
        if (outcome === 'not_open') throw conflict('the proposal is not open')
        if (outcome === 'stale') throw conflict("the artifact moved past the proposal's base version")
        if (decision === 'reject') return { proposal: proposalToWire(outcome.proposal) }
        return { artifact: artifactToWire(outcome.artifact!), proposal: proposalToWire(outcome.proposal) }
      }
    )
  }
}

export default artifactProposalsRoutes
