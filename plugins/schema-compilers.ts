import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'
import Ajv, { type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'
import type { FastifySchemaCompiler } from 'fastify'
import { refusingHostileInput } from './hostile-input.js'

// Fastify compiles a validator (Ajv) and a serializer (fast-json-stringify) for every route
// schema when an app gets ready: most of the CPU of building one. The same schema compiles to
// the same function, so the functions are kept for the process, by the schema's JSON and the
// shared schemas it may refer to. An instance builds one app and gains nothing; a process
// that builds many (a test file, a benchmark) compiles each schema once.

/** Both compilers, for Fastify's `schemaController.compilersFactory`. */
export const compilersFactory = {
  buildValidator: validatorFactory,
  buildSerializer: serializerFactory
}

interface Compiled<T> {
  /** `part`: what is compiled differently (bodies strictly, query strings coerced) */
  compile(schema: object, part: string): T
  functions: Map<string, T>
}

const validators = new Map<string, Compiled<ValidateFunction>>()
const serializers = new Map<string, Compiled<(doc: unknown) => string>>()

/** The function for `schema`: the one compiled before for the same JSON, or a new one. */
function memo<T>(kept: Compiled<T>, schema: object, part: string): T {
  const key = `${part} ${JSON.stringify(schema)}`
  let fn = kept.functions.get(key)
  if (!fn) kept.functions.set(key, (fn = kept.compile(schema, part)))
  return fn
}

/**
 * Request bodies are validated strictly (no type coercion, unknown fields rejected by
 * the schemas); query strings and params are strings on the wire, so they are coerced.
 * Every part but headers is first checked for the strings and nesting the API refuses.
 */
function validatorFactory(externalSchemas: Record<string, unknown>): FastifySchemaCompiler<object> {
  const key = JSON.stringify(externalSchemas)
  let kept = validators.get(key)
  if (!kept) {
    const make = (coerceTypes: boolean | 'array') => {
      const ajv = new Ajv.default({
        coerceTypes,
        useDefaults: true,
        removeAdditional: false,
        allErrors: false,
        strict: false
      })
      addFormats.default(ajv)
      for (const schema of Object.values(externalSchemas)) ajv.addSchema(schema as object)
      return ajv
    }
    const strict = make(false)
    const coercing = make('array')
    kept = {
      compile: (schema, part) => {
        const validate = (part === 'body' ? strict : coercing).compile(schema)
        // headers cannot carry NUL or surrogates (Node's parser refuses them first)
        return part === 'headers' ? validate : refusingHostileInput(validate)
      },
      functions: new Map()
    }
    validators.set(key, kept)
  }
  const compiled = kept
  return ({ schema, httpPart }) =>
    memo(compiled, schema, httpPart === 'body' || httpPart === 'headers' ? httpPart : 'coerced')
}

/** fast-json-stringify through Fastify's own compiler, each schema compiled once. */
function serializerFactory(externalSchemas: Record<string, unknown> | undefined, options: object | undefined) {
  const key = JSON.stringify([externalSchemas ?? {}, options ?? {}])
  let kept = serializers.get(key)
  if (!kept) {
    const compile = SerializerSelector()(externalSchemas, options)
    kept = {
      compile: (schema) => compile({ schema, method: '', url: '', httpStatus: '' }),
      functions: new Map()
    }
    serializers.set(key, kept)
  }
  const compiled = kept
  return ({ schema }: { schema: object }) => memo(compiled, schema, 'response')
}
