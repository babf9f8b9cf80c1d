/** A route option's hooks as a list (Fastify takes one function or an array), to add to. */
export function asList<T>(hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return []
  return Array.isArray(hooks) ? hooks : [hooks]
}
