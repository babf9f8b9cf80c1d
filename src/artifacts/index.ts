import { Readable } from 'node:stream'
import multipart from '@fastify/multipart'
import type { FastifyPluginAsyncTypebox, TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { createTwoFilesPatch } from 'diff'
import type { FastifyReply } from 'fastify'
import { text } from 'node:stream/consumers'
import {
  conflict,
  notFound,
  payloadTooLarge,
  preconditionFailed,
  preconditionRequired,
  unsupportedMediaType
} from '../../plugins/errors.js'
import {
  AcceptedProposal,
  ArtifactEnvelope,
  ArtifactPage,
  ContentHeaders,
  ContentResponse,
  CreateArtifactBody,
  CreateProposalBody,
  DiffResponse,
  IdParams,
  IfMatchHeaders,
  ListArtifactsQuery,
  ListProposalsQuery,
  ListUploadsQuery,
  ListVersionsQuery,
  ProposalEnvelope,
  ProposalPage,
  ProposalParams,
  UploadEnvelope,
  UploadPage,
  UploadRequestBody,
  VersionPage,
  VersionParams
} from '../../schemas/artifacts.js'
import { errorResponses } from '../../schemas/common.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { isUniqueViolation } from '../db/faults.js'
import { getRun } from '../runs/runs-repo.js'
import {
  addVersion,
  artifactToWire,
  createArtifact,
  createProposal,
  createUpload,
  decideProposal,
  deleteArtifact,
  deleteUpload,
  getArtifact,
  getProposal,
  getUpload,
  getVersion,
  listArtifacts,
  listProposals,
  listUploads,
  listVersions,
  proposalToWire,
  runArtifactNamed,
  uploadToWire,
  versionToWire
} from './artifacts-repo.js'
import type { StoredBlob } from './blobs.js'
import { receiveFile, refuseLargeLength, storeBody, oneFileLimits } from './receive.js'
import { cleanName } from './service.js'
import { sendContent } from './content.js'
import { isTextType, mediaTypeOf, sniffContentType } from './sniff.js'

const versionTag = (version: number) => `"v${version}"`

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

/** Artifacts and uploads. */
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

  async function artifactOf(orgId: string, id: string) {
    const artifact = await getArtifact(app.db, orgId, id)
    if (!artifact) throw notFound('no such artifact in this organization')
    return artifact
  }

  // ---- uploads ------------------------------------------------------------------

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

  // ---- artifacts ----------------------------------------------------------------

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
      return { artifact: artifactToWire(await artifactOf(principalOf(request).orgId, request.params.id)) }
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
      const a = await artifactOf(orgId, request.params.id)
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
        const current = await artifactOf(orgId, request.params.id)
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

  app.get(
    '/artifacts/:id/versions',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listArtifactVersions',
        tags: ['artifacts'],
        summary: 'Every version, newest first',
        description:
          "Pages through an artifact's versions, newest first, each with its size, checksum, content type and source.",
        params: IdParams,
        querystring: ListVersionsQuery,
        response: { 200: VersionPage, ...errorResponses(404) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      await artifactOf(orgId, request.params.id)
      const page = await listVersions(app.db, orgId, request.params.id, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
      return { items: page.items.map(versionToWire), nextCursor: page.nextCursor }
    }
  )

  app.get(
    '/artifacts/:id/versions/:version/content',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'getArtifactVersionContent',
        tags: ['artifacts'],
        summary: 'The bytes of one version (ETag "v<version>", Range as for the current content)',
        description:
          'Sends the bytes of one past or current version of an artifact, with the same caching and range rules as the current content.',
        params: VersionParams,
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
      const a = await artifactOf(orgId, request.params.id)
      const v = await getVersion(app.db, orgId, a.id, request.params.version)
      if (!v) throw notFound('no such version of this artifact')
      return sendContent(store, request, reply, {
        orgId,
        sha256: v.sha256,
        size: v.size,
        contentType: v.contentType,
        name: a.name,
        etag: versionTag(v.version),
        lastModified: v.createdAt
      })
    }
  )

  // ---- proposals ----------------------------------------------------------------

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
      const a = await artifactOf(orgId, request.params.id)
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
      await artifactOf(orgId, request.params.id)
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
      const a = await artifactOf(orgId, request.params.id)
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

export default artifactsRoutes
