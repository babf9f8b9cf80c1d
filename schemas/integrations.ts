import { Type } from 'typebox'
import { INTEGRATION_KINDS } from '../src/integrations/tables.js'
import { IsoDate, LiteralUnion, named, Nullable } from './common.js'

export const Integration = named(
  'Integration',
  Type.Object(
    {
      kind: LiteralUnion(INTEGRATION_KINDS),
      connected: Type.Boolean(),
      account: Nullable(Type.String({ description: 'the GitHub login or the Slack team it is connected as' })),
      connectedAt: Nullable(IsoDate),
      lastError: Nullable(
        Type.String({ description: 'the last failure talking to it, as a sentence; null when the last call worked' })
      )
    },
    { description: 'an integration of the org; its credentials are never returned' }
  )
)

export const IntegrationEnvelope = Type.Object({ integration: Integration })
export const IntegrationList = named('IntegrationList', Type.Object({ items: Type.Array(Integration) }))
