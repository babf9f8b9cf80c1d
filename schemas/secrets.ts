import { Type } from 'typebox'
import { IsoDate, named, Nullable, Page, PageQuery, StrictObject } from './common.js'

/** Secret names: also the environment variable a run's sandbox gets. */
export const SECRET_NAME_PATTERN = '^[A-Z][A-Z0-9_]{0,127}$'
export const SECRET_VALUE_MAX_BYTES = 64 * 1024

export const SecretName = Type.String({
  pattern: SECRET_NAME_PATTERN,
  description: 'upper case, digits and _; the environment variable a run gets'
})

export const Secret = named(
  'Secret',
  Type.Object(
    {
      name: Type.String(),
      createdAt: IsoDate,
      updatedAt: IsoDate,
      updatedBy: Nullable(Type.String({ description: 'the user who last set it; null for the dev org' })),
      lastUsedAt: Nullable(IsoDate)
    },
    { description: "a secret's name and dates; its value is never returned" }
  )
)

export const SecretParams = StrictObject({ name: SecretName })
export const PutSecretBody = named(
  'PutSecretRequest',
  StrictObject({
    value: Type.String({
      minLength: 1,
      maxLength: SECRET_VALUE_MAX_BYTES,
      description: 'at most 64 KiB (UTF-8); never returned'
    })
  })
)
export const SecretEnvelope = Type.Object({ secret: Secret })
export const SecretPage = named('SecretPage', Page(Secret))
export const ListSecretsQuery = StrictObject({ ...PageQuery })
