import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { conflict, notFound } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import {
  CreateRecordBody,
  IdParams,
  ListRecordsQuery,
  RecordEnvelope,
  RecordHistory,
  RecordPage,
  UpdateRecordBody
} from '../../schemas/knowledge.js'
import { principalOf, realUserId } from '../auth/principal.js'
import {
  createRecord,
  deleteRecord,
  getRecord,
  historyToWire,
  listRecords,
  recordHistory,
  recordToWire,
  updateRecord
} from './records-repo.js'

const TAGS = ['knowledge']

/** The tags a body names, each once (undefined when it names none). */
export const uniqueTags = (tags: string[] | undefined) => (tags === undefined ? undefined : [...new Set(tags)])

/** Knowledge records: /knowledge, /knowledge/:id and its history. */
const recordsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/knowledge',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createKnowledgeRecord',
        tags: TAGS,
        summary: 'Create a record (version 1)',
        description: 'Stores a knowledge record (title, body and optional tags) as version 1 and makes it searchable.',
        body: CreateRecordBody,
        response: { 201: RecordEnvelope, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const record = await createRecord(app.db, principal.orgId, {
        title: request.body.title,
        body: request.body.body,
        tags: uniqueTags(request.body.tags) ?? [],
        source: { kind: 'manual' },
        createdBy: realUserId(principal)
      })
      return reply.code(201).send({ record: recordToWire(record) })
    }
  )

  app.get(
    '/knowledge',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listKnowledgeRecords',
        tags: TAGS,
        summary: 'Records of the org, newest first; `tag` keeps those carrying it',
        description:
          "Pages through the organization's knowledge records, newest first, optionally only those with one tag.",
        querystring: ListRecordsQuery,
        response: { 200: RecordPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listRecords(app.db, orgId, {
        tag: request.query.tag,
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(recordToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/knowledge/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getKnowledgeRecord',
        tags: TAGS,
        summary: 'One record, at its current version',
        description: 'Returns one knowledge record at its current version.',
        params: IdParams,
        response: { 200: RecordEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const record = await getRecord(app.db, orgId, request.params.id)
      if (!record) throw notFound('no such knowledge record in this organization')
      return { record: recordToWire(record) }
    }
  )

  app.patch(
    '/knowledge/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'updateKnowledgeRecord',
        tags: TAGS,
        summary: 'A new version of a record; `version` must be the current one (409 otherwise)',
        description:
          "Writes a record's next version when the version sent is the current one, so concurrent edits are refused with 409 instead of lost.",
        params: IdParams,
        body: UpdateRecordBody,
        response: { 200: RecordEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const { version, ...change } = request.body
      const result = await updateRecord(
        app.db,
        principal.orgId,
        request.params.id,
        { ...change, tags: uniqueTags(change.tags) },
        version,
        realUserId(principal)
      )
      if (result === 'missing') throw notFound('no such knowledge record in this organization')
      if (result === 'stale')
        throw conflict(`version ${version} is not the record's current version; read it again and retry`)
      return { record: recordToWire(result) }
    }
  )

  app.delete(
    '/knowledge/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteKnowledgeRecord',
        tags: TAGS,
        summary: 'Delete a record (its history stays, ending with `deleted`)',
        description: 'Deletes a knowledge record; its history keeps every version and ends with the deletion.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      if (!(await deleteRecord(app.db, principal.orgId, request.params.id, realUserId(principal)))) {
        throw notFound('no such knowledge record in this organization')
      }
      return reply.code(204).send(null)
    }
  )

  app.get(
    '/knowledge/:id/history',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getKnowledgeRecordHistory',
        tags: TAGS,
        summary: 'Every version of a record, oldest first (also after it was deleted)',
        description: 'Lists every version of a knowledge record, oldest first, including after the record was deleted.',
        params: IdParams,
        response: { 200: RecordHistory, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const history = await recordHistory(app.db, orgId, request.params.id)
      if (!history) throw notFound('no such knowledge record in this organization')
      return { history: history.map(historyToWire) }
    }
  )
}

export default recordsRoutes
