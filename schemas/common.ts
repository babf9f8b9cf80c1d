import { Type, type TLiteral, type TObject, type TProperties, type TSchema, type TUnion } from 'typebox'

/** The key that names a schema in the OpenAPI document (see `named`). */
export const COMPONENT_NAME = 'x-component-name'

/**
 * Gives a schema its name in the OpenAPI document: plugins/openapi.ts moves every schema
 * carrying one into `components.schemas` and refers to it by `$ref`, so generated clients
 * get named types (`Run`, `MemoryItem`, ...). Routes keep using the schema itself, so their
 * handlers stay typed; validators and serializers ignore the key.
 */
export function named<T extends TSchema>(name: string, schema: T): T {
  return Object.assign(schema, { [COMPONENT_NAME]: name })
}

/** An object that rejects fields it does not name: unknown input is a 400, not silently dropped. */
export function StrictObject<T extends TProperties>(properties: T, options: Record<string, unknown> = {}): TObject<T> {
  return Type.Object(properties, { additionalProperties: false, ...options })
}

/**
 * A union of string literals from one `as const` list: the list stays the one source (tables build their CHECK from
 * it).
 */
export function LiteralUnion<const T extends readonly string[]>(
  values: T,
  options: Record<string, unknown> = {}
): TUnion<{ -readonly [K in keyof T]: TLiteral<T[K]> }> {
  return Type.Union(
    values.map((value) => Type.Literal(value)),
    options
  ) as never
}

/** A value or null. */
export const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) =>
  Type.Union([schema, Type.Null()])

/** `createdBy`: who made an object. */
export const CreatedBy = Nullable(
  Type.String({ description: 'the user who made it; null for an API key, the dev org or a run' })
)

/** The `Idempotency-Key` request header of the routes that honour it (a retry answers what the first request did). */
export const IdempotencyKeyHeader = {
  type: 'object',
  properties: { 'idempotency-key': { type: 'string', description: '1 to 255 characters' } }
} as const

export const Id = Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'opaque id' })
export const IsoDate = Type.String({ format: 'date-time', description: 'ISO-8601 UTC timestamp' })
/** The params of a route on one object: `/things/:id`. */
export const IdParams = StrictObject({ id: Id })

/** The error body of every 4xx and 5xx answer. */
export const ErrorBody = Type.Object(
  {
    error: Type.String({ description: 'stable identifier' }),
    message: Type.String({ description: 'human sentence' }),
    release: Type.Optional(Type.String()),
    details: Type.Optional(
      Type.Array(
        Type.Object({
          path: Type.String(),
          message: Type.String(),
          line: Type.Optional(
            Type.Integer({ minimum: 1, description: 'in a file sent as text (a SKILL.md): the 1-based line' })
          ),
          column: Type.Optional(Type.Integer({ minimum: 1, description: 'and the 1-based column' }))
        })
      )
    )
  },
  { $id: 'ErrorBody', description: 'an error' }
)

/** Error responses every /api route can produce before its handler runs. */
export function errorResponses(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {}
  for (const status of new Set([400, 401, 403, 409, 500, ...statuses])) out[status] = Type.Ref('ErrorBody')
  return out
}

/** A list's cursor: its last page's `nextCursor`, as it came (anything else is 400 validation_failed). */
export const Cursor = Type.String({
  minLength: 1,
  maxLength: 512,
  pattern: '^[A-Za-z0-9_-]+$',
  description: "the previous page's nextCursor, as it came; leave it out for the first page"
})

export const PageQuery = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
  cursor: Type.Optional(Cursor)
}

export function Page<T extends TSchema>(item: T) {
  return Type.Object({ items: Type.Array(item), nextCursor: Type.Union([Type.String(), Type.Null()]) })
}
