import multipart from '@fastify/multipart'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { notFound } from '../../plugins/errors.js'
import {
  ContentHeaders,
  ContentResponse,
  IdParams,
  ListUploadsQuery,
  UploadEnvelope,
  UploadPage,
  UploadRequestBody
} from '../../schemas/artifacts.js'
import { errorResponses } from '../../schemas/common.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { createUpload, deleteUpload, getUpload, listUploads, uploadToWire } from './artifacts-repo.js'
import { receiveFile, oneFileLimits } from './receive.js'
import { cleanName } from './service.js'
import { sendContent } from './content.js'
import { sniffContentType } from './sniff.js'

/** Uploads: files sent as multipart that runs and artifacts use by id (/uploads). */
const uploadsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { store, maxBytes } = app.artifacts
  const target = { db: app.db, store, maxBytes }

  await app.register(async function multipartUploads(scope) {
    // one file per request
    await scope.register(multipart, { limits: oneFileLimits(maxBytes) })

    scope.post(
      '/uploads',
      {
        config: { streamedBody: { mediaType: 'multipart/form-data', schema: UploadRequestBody }, keyAccess: 'none' },
        schema: {
          operationId: 'createUpload',
          tags: ['artifacts'],
          summary: 'Upload a file (multipart, one field `file`); its type is sniffed from the bytes',
          description:
            'Stores one file sent as multipart, sniffs its real type from its bytes, and returns the upload that runs and artifacts can then use by id.',
          response: { 201: UploadEnvelope, ...errorResponses(413, 415, 507) }
        }
      },
      async (request, reply) => {
        const principal = principalOf(request)
        const { blob, filename, mimetype } = await receiveFile(target, request, reply, principal.orgId)
        const upload = await createUpload(app.db, {
          orgId: principal.orgId,
          name: cleanName(filename || 'upload'),
          contentType: await sniffContentType(blob.head, mimetype),
          blob,
          createdBy: realUserId(principal)
        })
        return reply.code(201).send({ upload: uploadToWire(upload) })
      }
    )
  })

  app.get(
    '/uploads',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listUploads',
        tags: ['artifacts'],
        summary: 'Uploads of the org, newest first',
        description: "Pages through the organization's uploads, newest first.",
        querystring: ListUploadsQuery,
        response: { 200: UploadPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await listUploads(app.db, orgId, { limit: request.query.limit ?? 50, cursor: request.query.cursor })
      return { items: page.items.map(uploadToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/uploads/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getUpload',
        tags: ['artifacts'],
        summary: 'One upload',
        description: "Returns one upload's name, type, size and dates.",
        params: IdParams,
        response: { 200: UploadEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      const upload = await getUpload(app.db, principalOf(request).orgId, request.params.id)
      if (!upload) throw notFound('no such upload in this organization')
      return { upload: uploadToWire(upload) }
    }
  )

  app.get(
    '/uploads/:id/content',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getUploadContent',
        tags: ['artifacts'],
        summary: 'The uploaded bytes (ETag, Range, If-None-Match as for artifact content)',
        description: 'Sends the bytes of an upload with their stored type, answering conditional and range requests.',
        params: IdParams,
        headers: ContentHeaders,
        response: {
          200: ContentResponse('the bytes'),
          206: ContentResponse('the requested range'),
          304: { type: 'null', description: 'not modified' },
          ...errorResponses(404, 416)
        }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      const upload = await getUpload(app.db, orgId, request.params.id)
      if (!upload) throw notFound('no such upload in this organization')
      return sendContent(store, request, reply, {
        orgId,
        sha256: upload.sha256,
        size: upload.size,
        contentType: upload.contentType,
        name: upload.name,
        etag: `"${upload.sha256}"`,
        lastModified: upload.createdAt
      })
    }
  )

  app.delete(
    '/uploads/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteUpload',
        tags: ['artifacts'],
        summary: 'Delete an upload (its bytes go once nothing else uses them)',
        description: 'Deletes an upload record; its stored bytes are removed once nothing else uses them.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      if (!(await deleteUpload(app.db, principalOf(request).orgId, request.params.id)))
        throw notFound('no such upload in this organization')
      return reply.code(204).send(null)
    }
  )
}

export default uploadsRoutes
