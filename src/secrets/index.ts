import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { notFound, validationFailed } from '../../plugins/errors.js'
import { errorResponses } from '../../schemas/common.js'
import {
  ListSecretsQuery,
  PutSecretBody,
  SECRET_VALUE_MAX_BYTES,
  SecretEnvelope,
  SecretPage,
  SecretParams
} from '../../schemas/secrets.js'
import { principalOf, realUserId } from '../auth/principal.js'
import { secretToWire } from './secrets-repo.js'

const SECRETS = ['secrets']
const ADMIN = { scope: 'admin' } as const

/** Org secrets, admin only; a value goes in and never comes out. */
const secretsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/secrets',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'listSecrets',
        tags: SECRETS,
        summary: "The org's secrets by name: names and dates, never values (admin)",
        description:
          "Lists the organization's secrets by name with their dates; values are never returned; only admins may.",
        querystring: ListSecretsQuery,
        response: { 200: SecretPage, ...errorResponses(503) }
      }
    },
    async (request) => {
      const { orgId } = principalOf(request)
      const page = await app.secrets.list(orgId, { limit: request.query.limit ?? 50, cursor: request.query.cursor })
      return { items: page.items.map(secretToWire), nextCursor: page.nextCursor }
    }
  )

  app.put(
    '/secrets/:name',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'putSecret',
        tags: SECRETS,
        summary:
          'Set a secret: 201 when the name is new, 200 when its value is replaced (admin); the value is sealed and never returned',
        description:
          'Seals the value under the name given, creating the secret or replacing its value; runs receive it as an environment variable.',
        params: SecretParams,
        body: PutSecretBody,
        response: { 200: SecretEnvelope, 201: SecretEnvelope, ...errorResponses(503) }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const { value } = request.body
      if (Buffer.byteLength(value, 'utf8') > SECRET_VALUE_MAX_BYTES) {
        throw validationFailed([
          { path: '/body/value', message: `must be at most ${SECRET_VALUE_MAX_BYTES} bytes (UTF-8)` }
        ])
      }
      const { row, created } = await app.secrets.put(principal.orgId, request.params.name, value, realUserId(principal))
      return reply.code(created ? 201 : 200).send({ secret: secretToWire(row) })
    }
  )

  app.delete(
    '/secrets/:name',
    {
      config: { ...ADMIN, keyAccess: 'none' },
      schema: {
        operationId: 'deleteSecret',
        tags: SECRETS,
        summary: 'Delete a secret (admin); runs that name it afterwards fail',
        description: 'Deletes a secret; runs that ask for it afterwards fail instead of starting without it.',
        params: SecretParams,
        response: { 204: { type: 'null', description: 'deleted' }, ...errorResponses(404, 503) }
      }
    },
    async (request, reply) => {
      const { orgId } = principalOf(request)
      if (!(await app.secrets.remove(orgId, request.params.name))) throw notFound('no such secret in this organization')
      return reply.code(204).send(null)
    }
  )
}

export default secretsRoutes
