import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { conflict, notFound } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import {
  ApprovedDraft,
  ApproveDraftBody,
  CreateDraftBody,
  DraftEnvelope,
  DraftPage,
  IdParams,
  ListDraftsQuery
} from '../../schemas/knowledge.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { approveDraft, createDraft, draftToWire, listDrafts, rejectDraft } from './drafts-repo.js'
import { getRecord, recordToWire } from './records-repo.js'
import { uniqueTags } from './records-routes.js'

const TAGS = ['knowledge']

/** Proposed knowledge a person approves or rejects: /knowledge/drafts. */
const draftsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/knowledge/drafts',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createKnowledgeDraft',
        tags: TAGS,
        summary: 'Propose knowledge: an open draft (a new record, or a new version of `targetRecordId`, once approved)',
        description:
          'Records proposed knowledge as an open draft that a person approves or rejects: a new record, or a new version of the target record.',
        body: CreateDraftBody,
        response: { 201: DraftEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { targetRecordId } = request.body
      if (targetRecordId !== undefined && !(await getRecord(app.db, principal.orgId, targetRecordId))) {
        throw notFound('no such knowledge record in this organization (targetRecordId)')
      }
      const draft = await createDraft(app.db, principal.orgId, {
        title: request.body.title,
        body: request.body.body,
        tags: uniqueTags(request.body.tags) ?? [],
        targetRecordId: targetRecordId ?? null,
        runId: null,
        createdBy: realUserId(principal)
      })
      return reply.code(201).send({ draft: draftToWire(draft) })
    }
  )

  app.get(
    '/knowledge/drafts',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listKnowledgeDrafts',
        tags: TAGS,
        summary: 'Drafts of the org, newest first; `state` keeps one state',
        description:
          "Pages through the organization's knowledge drafts, newest first, optionally only those in one state.",
        querystring: ListDraftsQuery,
        response: { 200: DraftPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listDrafts(app.db, orgId, {
        state: request.query.state,
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(draftToWire), nextCursor: page.nextCursor }
    }
  )

  app.post(
    '/knowledge/drafts/:id/approve',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'approveKnowledgeDraft',
        tags: TAGS,
        summary: 'Approve an open draft (with optional edits): a new record, or a new version of its target',
        description:
          "Approves an open draft, optionally edited, creating the record or the target record's next version.",
        params: IdParams,
        // the edits are optional, and so is the body itself
        body: Type.Union([ApproveDraftBody, Type.Null()]),
        response: { 200: ApprovedDraft, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const body = request.body ?? {}
      const result = await approveDraft(
        app.db,
        principal.orgId,
        request.params.id,
        { ...body, tags: uniqueTags(body.tags) },
        realUserId(principal)
      )
      if (result === 'missing') throw notFound('no such knowledge draft in this organization')
      if (result === 'not-open') throw conflict('the draft was already decided')
      if (result === 'target-gone') throw conflict('the record this draft revises was deleted')
      return { draft: draftToWire(result.draft), record: recordToWire(result.record) }
    }
  )

  app.post(
    '/knowledge/drafts/:id/reject',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'rejectKnowledgeDraft',
        tags: TAGS,
        summary: 'Reject an open draft',
        description: 'Closes an open draft without touching any record.',
        params: IdParams,
        response: { 200: DraftEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const result = await rejectDraft(app.db, principal.orgId, request.params.id, realUserId(principal))
      if (result === 'missing') throw notFound('no such knowledge draft in this organization')
      if (result === 'not-open') throw conflict('the draft was already decided')
      return { draft: draftToWire(result) }
    }
  )
}

export default draftsRoutes
