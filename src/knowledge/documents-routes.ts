import multipart from '@fastify/multipart'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { conflict, notFound, unsupportedMediaType } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import {
  ChunkList,
  DocumentEnvelope,
  DocumentPage,
  DocumentUploadBody,
  IdParams,
  ListDocumentsQuery
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
import { contentTypeOf, documentKind, DOCUMENT_KINDS } from './extract.js'

const TAGS = ['knowledge']

/** Documents made searchable: /knowledge/documents and its chunks. */
const documentsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { worker, store, maxBytes, maxAttempts } = app.knowledge

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
}

export default documentsRoutes
