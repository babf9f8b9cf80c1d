import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { notFound } from '../../plugins/errors.js'
import { principalOf, realUserId } from './principal.js'
import { ApiKeyList, KeyParams, MintedKey, MintKeyBody } from '../../schemas/auth.js'
import { errorResponses } from '../../schemas/common.js'
import { toWire } from '../db/wire.js'
import { listKeys, mintKey, revokeKey } from './api-keys-repo.js'

const tags = ['keys']

/** API keys: org-admin; mint and revoke need a session, never a key; mint needs a real user. */
const keys: FastifyPluginAsyncTypebox = async (app) => {
  // a real signed-in user: the dev fallback mints nothing, or a key would
  // carry loopback-only dev access to any address
  app.post(
    '',
    {
      config: { scope: ['admin', 'session', 'user'], keyAccess: 'none' },
      schema: {
        operationId: 'mintApiKey',
        description:
          'Creates an API key for the active organization and returns the key itself in this answer only; the service keeps just its hash and last four characters.',
        tags,
        summary: 'Mint an API key for the organization; the key is shown in this answer only',
        body: MintKeyBody,
        response: { 201: MintedKey, ...errorResponses() }
      }
    },
    async (request, reply) => {
      const principal = principalOf(request)
      const minted = await mintKey(app.db, principal.orgId, realUserId(principal), request.body.name)
      return reply.code(201).header('cache-control', 'no-store').send(toWire(minted))
    }
  )

  app.get(
    '',
    {
      config: { scope: 'admin', keyAccess: 'none' },
      schema: {
        operationId: 'listApiKeys',
        tags,
        summary: "The organization's API keys (never the keys themselves)",
        description:
          "Lists the organization's API keys with their names, last four characters, creation, last use and revocation, never the keys themselves.",
        response: { 200: ApiKeyList, ...errorResponses() }
      }
    },
    async (request) => ({ items: (await listKeys(app.db, principalOf(request).orgId)).map(toWire) })
  )

  app.delete(
    '/:id',
    {
      config: { scope: ['admin', 'session'], keyAccess: 'none' },
      schema: {
        operationId: 'revokeApiKey',
        description:
          "Marks an API key revoked so every later request that presents it is refused; the key's record stays for the audit trail.",
        tags,
        summary: 'Revoke an API key (kept, marked revoked); effective on the next request',
        params: KeyParams,
        response: { 204: { type: 'null' }, ...errorResponses(404) }
      }
    },
    async (request, reply) => {
      if (!(await revokeKey(app.db, principalOf(request).orgId, request.params.id))) throw notFound('no such API key')
      await app.identity.invalidate()
      return reply.code(204).send(null)
    }
  )
}

export default keys
