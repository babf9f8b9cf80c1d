import multipart from '@fastify/multipart'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import { conflict, notFound, unsupportedMediaType } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import {
  ApprovedDraft,
  ApproveDraftBody,
  ChunkList,
  CreateDraftBody,
  CreateRecordBody,
  DocumentEnvelope,
  DocumentPage,
  DocumentUploadBody,
  DraftEnvelope,
  DraftPage,
  IdParams,
  ListDocumentsQuery,
  ListDraftsQuery,
  ListRecordsQuery,
  RecordEnvelope,
  RecordHistory,
  RecordPage,
  SearchQuery,
  SearchResult,
  UpdateRecordBody
} from '../../schemas/knowledge.js'
import { receiveFile, oneFileLimits } from '../artifacts/receive.js'
import { cleanName } from '../artifacts/service.js'
import { principalOf, realUserId } from '../auth/principal.js'
import {
  createDocument,
  deleteDocument,
  documentChunks,
  documentToWire,
  getDocument,
  listDocuments,
  retryDocument
} from './documents-repo.js'
import { approveDraft, createDraft, draftToWire, listDrafts, rejectDraft } from './drafts-repo.js'
import { contentTypeOf, documentKind, DOCUMENT_KINDS } from './extract.js'
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
const uniqueTags = (tags: string[] | undefined) => (tags === undefined ? undefined : [...new Set(tags)])

/** Knowledge records, search, documents and drafts. */
const knowledgeRoutes: FastifyPluginAsyncTypebox = async (app) => {
  // a record written here is embedded soon (its row is pending from the write's own statement)
  app.addHook('onResponse', async (request, reply) => {
    if (request.method !== 'GET' && reply.statusCode < 300) app.retrieval.worker?.wake()
  })
  const { worker, store, maxBytes, maxAttempts } = app.knowledge

  // ---- records ------------------------------------------------------------------

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
    '/knowledge/search',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'searchKnowledge',
        tags: TAGS,
        summary: 'Records and document chunks in one ranked list (web search syntax: "phrase", or, -word)',
        description:
          'Searches records and extracted document chunks by their words and their meaning (fused by reciprocal rank, or one of the two with `mode`) and returns one ranked list of hits, each with a snippet whose matches are marked.',
        querystring: SearchQuery,
        response: { 200: SearchResult, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const started = performance.now()
      const outcome = await app.knowledge.search(orgId, {
        q: request.query.q,
        tag: request.query.tag,
        limit: request.query.limit ?? 10,
        mode: request.query.mode
      })
      return { ...outcome, latencyMs: Math.round((performance.now() - started) * 100) / 100 }
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

  // ---- documents ----------------------------------------------------------------

  await app.register(async function multipartDocuments(scope) {
    await scope.register(multipart, { limits: oneFileLimits(maxBytes) })

    scope.post(
      '/knowledge/documents',
      {
        config: { streamedBody: { mediaType: 'multipart/form-data', schema: DocumentUploadBody }, keyAccess: 'none' },
        schema: {
          operationId: 'createKnowledgeDocument',
          tags: TAGS,
          summary:
            'Upload a document (multipart field `file`: PDF, DOCX, HTML, Markdown or text); its text is extracted into chunks',
          description:
            'Stores an uploaded document and queues it for extraction: its text is pulled out and split into searchable chunks by a background worker.',
          response: { 202: DocumentEnvelope, ...errorResponses(413, 415, 507) }
        }
      },
      async (request, reply) => {
        const principal = principalOf(request)
        const { blob, filename, mimetype } = await receiveFile(
          { db: app.db, store, maxBytes },
          request,
          reply,
          principal.orgId
        )
        const name = cleanName(filename || 'document')
        const kind = await documentKind(name, mimetype, blob.head)
        // the bytes stay unreferenced: the blob sweeper removes them once their pin passes
        if (!kind)
          throw unsupportedMediaType(
            `a knowledge document is one of: ${DOCUMENT_KINDS.join(', ')}; this file is none of them`
          )
        const document = await createDocument(app.db, {
          orgId: principal.orgId,
          name,
          kind,
          contentType: contentTypeOf(kind),
          blob,
          maxAttempts,
          createdBy: realUserId(principal)
        })
        worker.wake()
        return reply.code(202).send({ document: documentToWire(document) })
      }
    )
  })

  app.get(
    '/knowledge/documents',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listKnowledgeDocuments',
        tags: TAGS,
        summary: 'Documents of the org, newest first',
        description: "Pages through the organization's documents, newest first, with where each extraction stands.",
        querystring: ListDocumentsQuery,
        response: { 200: DocumentPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listDocuments(app.db, orgId, {
        state: request.query.state,
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(documentToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/knowledge/documents/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getKnowledgeDocument',
        tags: TAGS,
        summary: 'One document and where its extraction stands',
        description: 'Returns one document with its extraction state, attempts and last error.',
        params: IdParams,
        response: { 200: DocumentEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const document = await getDocument(app.db, orgId, request.params.id)
      if (!document) throw notFound('no such knowledge document in this organization')
      return { document: documentToWire(document) }
    }
  )

  app.get(
    '/knowledge/documents/:id/chunks',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listKnowledgeDocumentChunks',
        tags: TAGS,
        summary: 'The chunks of a document, in order',
        description: 'Pages through the text chunks extracted from a document, in document order.',
        params: IdParams,
        response: { 200: ChunkList, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const document = await getDocument(app.db, orgId, request.params.id)
      if (!document) throw notFound('no such knowledge document in this organization')
      return { items: await documentChunks(app.db, orgId, document.id) }
    }
  )

  app.post(
    '/knowledge/documents/:id/retry',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'retryKnowledgeDocument',
        tags: TAGS,
        summary: 'Queue a failed document again, with a fresh budget of attempts (409 unless failed)',
        description: 'Queues a document whose extraction failed again with a fresh budget of attempts.',
        params: IdParams,
        response: { 202: DocumentEnvelope, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const result = await retryDocument(app.db, orgId, request.params.id)
      if (result === 'missing') throw notFound('no such knowledge document in this organization')
      if (result === 'not-failed') throw conflict('only a failed document can be retried')
      worker.wake()
      return reply.code(202).send({ document: documentToWire(result) })
    }
  )

  app.delete(
    '/knowledge/documents/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteKnowledgeDocument',
        tags: TAGS,
        summary: 'Delete a document and its chunks',
        description: 'Deletes a document together with its chunks, so it no longer appears in search.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await deleteDocument(app.db, orgId, request.params.id)))
        throw notFound('no such knowledge document in this organization')
      return reply.code(204).send(null)
    }
  )

  // ---- drafts -------------------------------------------------------------------

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

export default knowledgeRoutes
