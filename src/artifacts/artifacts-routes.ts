import { Readable } from 'node:stream'
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { FastifyReply } from 'fastify'
import {
  conflict,
  notFound,
  payloadTooLarge,
  preconditionFailed,
  preconditionRequired,
  unsupportedMediaType
} from '../../plugins/errors.js'
import {
  ArtifactEnvelope,
  ArtifactPage,
  ContentHeaders,
  ContentResponse,
  CreateArtifactBody,
  IdParams,
  IfMatchHeaders,
  ListArtifactsQuery
} from '../../schemas/artifacts.js'
import { errorResponses } from '../../schemas/common.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { isUniqueViolation } from '../db/faults.js'
import { getRun } from '../runs/runs-repo.js'
import {
  addVersion,
  artifactToWire,
  createArtifact,
  deleteArtifact,
  getUpload,
  listArtifacts,
  runArtifactNamed
} from './artifacts-repo.js'
import type { StoredBlob } from './blobs.js'
import { refuseLargeLength, storeBody } from './receive.js'
import { sendContent } from './content.js'
import { isTextType, mediaTypeOf } from './sniff.js'
import { artifactOf, versionTag } from './route-helpers.js'

/**
 * The version an If-Match names: `"v<n>"` for one version, `*` for whichever
 * is current. Weak tags never match (RFC 9110 compares If-Match strongly).
 */
function expectedVersion(header: string | undefined): number | null | 'none' {
  if (header === undefined) throw preconditionRequired()
  if (header.trim() === '*') return null
  for (const tag of header.split(',')) {
    const m = /^"v([1-9][0-9]{0,9})"$/.exec(tag.trim())
    if (m) return Number(m[1])
  }
  return 'none'
}

/** Artifacts and their current content: /artifacts, /artifacts/:id and its content. */
const artifactsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { store, maxBytes } = app.artifacts
  const target = { db: app.db, store, maxBytes }
  const storeBodyOf = (reply: FastifyReply, orgId: string, body: Readable) => storeBody(target, reply, orgId, body)

  async function runOf(orgId: string, runId: string | undefined) {
    if (runId === undefined) return null
    const run = await getRun(app.db, orgId, runId)
    if (!run) throw notFound('no such run in this organization')
    return run
  }

  app.post(
    '/artifacts',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'createArtifact',
        tags: ['artifacts'],
        summary: 'Make an artifact from text or from an upload (version 1, source `api`)',
        description:
          'Creates an artifact from text in the body or from an earlier upload; its first version is recorded with source `api`.',
        body: CreateArtifactBody,
        response: { 201: ArtifactEnvelope, ...errorResponses(404, 409, 413, 415, 507) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { orgId } = principal
      const body = request.body
      const run = await runOf(orgId, body.runId)
      // a run has one artifact per name: said before any bytes are stored, and by the unique
      // index when two requests race
      const nameTaken = () =>
        conflict(
          `the run already has an artifact named ${JSON.stringify(body.name)}; write its next version with PUT /api/artifacts/:id/content`
        )
      if (run && (await runArtifactNamed(app.db, orgId, run.id, body.name)) !== null) throw nameTaken()
      let blob: Pick<StoredBlob, 'sha256' | 'size'>
      let contentType: string
      if ('uploadId' in body) {
        const upload = await getUpload(app.db, orgId, body.uploadId)
        if (!upload) throw notFound('no such upload in this organization')
        blob = upload
        contentType = upload.contentType
      } else {
        const type = body.contentType === undefined ? 'text/plain' : mediaTypeOf(body.contentType)
        if (type === null || !isTextType(type))
          throw unsupportedMediaType(
            'text content takes a text media type (text/*, application/json, ...); upload other files'
          )
        contentType = body.contentType ?? 'text/plain'
        if (Buffer.byteLength(body.content) > maxBytes) throw payloadTooLarge(maxBytes)
        blob = await storeBodyOf(reply, orgId, Readable.from([Buffer.from(body.content, 'utf8')]))
      }
      let artifact
      try {
        artifact = await app.db.transaction((tx) =>
          createArtifact(tx, orgId, {
            name: body.name,
            blob,
            contentType,
            source: 'api',
            runId: run?.id ?? null,
            rootRunId: run?.rootRunId ?? null,
            createdBy: realUserId(principal)
          })
        )
      } catch (err) {
        if (run && isUniqueViolation(err)) throw nameTaken()
        throw err
      }
      return reply.code(201).send({ artifact: artifactToWire(artifact) })
    }
  )

  app.get(
    '/artifacts',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listArtifacts',
        tags: ['artifacts'],
        summary: 'Artifacts of the org, newest first; filter by run or thread',
        description:
          "Pages through the organization's artifacts, newest first, optionally only those made by one run or in one thread.",
        querystring: ListArtifactsQuery,
        response: { 200: ArtifactPage, ...errorResponses() }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const q = request.query
      const page = await listArtifacts(app.db, orgId, {
        limit: q.limit ?? 50,
        cursor: q.cursor,
        runId: q.runId,
        rootRunId: q.rootRunId
      })
      return { items: page.items.map(artifactToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/artifacts/:id',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getArtifact',
        tags: ['artifacts'],
        summary: 'One artifact (its current version)',
        description: 'Returns one artifact and the metadata of its current version.',
        params: IdParams,
        response: { 200: ArtifactEnvelope, ...errorResponses(404) }
      }
    },
    async (request) => {
      return { artifact: artifactToWire(await artifactOf(app.db, principalOf(request).orgId, request.params.id)) }
    }
  )

  app.delete(
    '/artifacts/:id',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'deleteArtifact',
        tags: ['artifacts'],
        summary: 'Delete an artifact with every version and proposal',
        description: 'Deletes an artifact together with all its versions and proposals.',
        params: IdParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      if (!(await deleteArtifact(app.db, principalOf(request).orgId, request.params.id)))
        throw notFound('no such artifact in this organization')
      return reply.code(204).send(null)
    }
  )

  app.get(
    '/artifacts/:id/content',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'getArtifactContent',
        tags: ['artifacts'],
        summary: 'The current version\'s bytes: ETag "v<version>", If-None-Match → 304, one Range → 206, If-Range',
        description:
          "Sends the current version's bytes, with an ETag that names the version, honouring If-None-Match, Range and If-Range.",
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
      const a = await artifactOf(app.db, orgId, request.params.id)
      return sendContent(store, request, reply, {
        orgId,
        sha256: a.sha256,
        size: a.size,
        contentType: a.contentType,
        name: a.name,
        etag: versionTag(a.version),
        lastModified: a.updatedAt
      })
    }
  )

  await app.register(async function rawContent(plain) {
    const scope = plain.withTypeProvider<TypeBoxTypeProvider>()
    // the body is the new content as sent, any type: read as a stream, never parsed
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))

    scope.put(
      '/artifacts/:id/content',
      {
        config: {
          streamedBody: {
            mediaType: '*/*',
            schema: { type: 'string', format: 'binary', description: 'the new content; its Content-Type is kept' }
          },
          keyAccess: 'none'
        },
        schema: {
          operationId: 'putArtifactContent',
          tags: ['artifacts'],
          summary: 'Replace the content (a new version, source `edit`); If-Match with the current ETag is required',
          description:
            "Stores the body as the artifact's next version when If-Match names the current one, so two editors cannot overwrite each other.",
          params: IdParams,
          headers: IfMatchHeaders,
          response: { 200: ArtifactEnvelope, ...errorResponses(404, 412, 413, 428, 507) }
        }
      },
      async (request, reply) => {
        const principal = principalOf(request)
        const { orgId } = principal
        const current = await artifactOf(app.db, orgId, request.params.id)
        const expected = expectedVersion(request.headers['if-match'])
        if (expected === 'none' || (expected !== null && expected !== current.version)) {
          throw preconditionFailed(
            `the artifact is at version ${current.version} (ETag ${versionTag(current.version)})`
          )
        }
        refuseLargeLength(request, reply, maxBytes, 0)
        const declared = request.headers['content-type']
        const contentType =
          declared !== undefined && mediaTypeOf(declared) !== null ? declared.trim() : 'application/octet-stream'
        const body = request.body instanceof Readable ? request.body : Readable.from([])
        const blob = await storeBodyOf(reply, orgId, body)
        const next = await app.db.transaction((tx) =>
          addVersion(tx, orgId, current.id, expected ?? current.version, {
            blob,
            contentType,
            source: 'edit',
            runId: null,
            createdBy: realUserId(principal)
          })
        )
        if (next === null) throw notFound('no such artifact in this organization')
        if (next === 'stale')
          throw preconditionFailed('the artifact changed while the content was sent; fetch it and retry')
        reply.header('etag', versionTag(next.version))
        return { artifact: artifactToWire(next) }
      }
    )
  })
}

export default artifactsRoutes
