import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { notFound } from '../../plugins/errors.js'
import {
  ContentHeaders,
  ContentResponse,
  IdParams,
  ListVersionsQuery,
  VersionPage,
  VersionParams
} from '../../schemas/artifacts.js'
import { errorResponses } from '../../schemas/common.js'
import { principalOf } from '../auth/principal.js'
import { getVersion, listVersions, versionToWire } from './artifacts-repo.js'
import { sendContent } from './content.js'
import { artifactOf, versionTag } from './route-helpers.js'

/** An artifact's versions and their bytes: /artifacts/:id/versions. */
const artifactVersionsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { store } = app.artifacts

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
      await artifactOf(app.db, orgId, request.params.id)
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
      const a = await artifactOf(app.db, orgId, request.params.id)
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
}

export default artifactVersionsRoutes
