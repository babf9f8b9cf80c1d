import { Type } from 'typebox'
import { named, StrictObject } from './common.js'

export const HealthQuery = StrictObject({
  ready: Type.Optional(Type.Union([Type.Literal('1'), Type.Literal('true')], {
    description: 'also check that the database answers (503 when it does not)'
  }))
})

export const Health = named('Health', Type.Object({ status: Type.Literal('ok') }))

export const ClientConfig = named('ClientConfig', Type.Object({
  auth: Type.Object({ google: Type.Boolean(), emailPassword: Type.Boolean() }),
  allowDevOrg: Type.Boolean(),
  release: Type.String(),
  engines: Type.Array(Type.Object({ id: Type.String(), name: Type.String() })),
  models: Type.Array(Type.Object({ id: Type.String(), engine: Type.String(), name: Type.String() })),
  sandbox: Type.Object({ provider: Type.String() }),
  capabilities: Type.Object({
    github: Type.Boolean(),
    slack: Type.Boolean(),
    memory: Type.Boolean(),
    toolGateway: Type.Boolean()
  }),
  artifacts: Type.Object({ fidelity: Type.Union([Type.Literal('full'), Type.Literal('preview')]) })
}))
