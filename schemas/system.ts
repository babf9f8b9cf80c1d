import { Type } from 'typebox'
import { named, StrictObject } from './common.js'

export const HealthQuery = StrictObject({
  ready: Type.Optional(
    Type.Union([Type.Literal('1'), Type.Literal('true')], {
      description: 'also check that the database answers (503 when it does not)'
    })
  )
})

export const Health = named('Health', Type.Object({ status: Type.Literal('ok') }))

export const ClientConfig = named(
  'ClientConfig',
  Type.Object({
    auth: Type.Object({ google: Type.Boolean(), emailPassword: Type.Boolean() }),
    allowDevOrg: Type.Boolean({
      description:
        'whether this caller acts in the dev org without signing in (ALLOW_DEV_ORG on and the caller on loopback)'
    }),
    release: Type.String(),
    engines: Type.Array(Type.Object({ id: Type.String(), name: Type.String() })),
    models: Type.Array(Type.Object({ id: Type.String(), engine: Type.String(), name: Type.String() })),
    sandbox: Type.Object({
      provider: Type.String({
        description: 'the provider that runs tools, terminals and desktops; `none` when nothing may run them'
      }),
      available: Type.Boolean({
        description: 'false: tools are not offered and terminal/desktop sockets answer 503 sandbox_unavailable'
      }),
      confinement: Type.Union([Type.String(), Type.Null()], {
        description:
          'how commands are confined: `bwrap` (bubblewrap), `none` (plain processes, only with SANDBOX_UNCONFINED=true), or null without a provider'
      }),
      reason: Type.Union([Type.String(), Type.Null()], {
        description: 'why there is no sandbox (names bubblewrap when that is why); null when available'
      })
    }),
    capabilities: Type.Object({
      github: Type.Boolean(),
      slack: Type.Boolean(),
      memory: Type.Boolean(),
      semanticSearch: Type.Boolean({
        description:
          'memory and knowledge search also match meaning (vectors); false where the database has no pgvector: words only'
      }),
      toolGateway: Type.Boolean()
    }),
    artifacts: Type.Object({ fidelity: Type.Union([Type.Literal('full'), Type.Literal('preview')]) })
  })
)
