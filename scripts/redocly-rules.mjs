// Redocly rules of this repository (redocly.yaml's `plugins`). `cairn/no-ambiguous-paths` is
// Redocly's own no-ambiguous-paths, except for the pairs of paths its `allowed` option names:
// a pair the API keeps on purpose is written down once, with why, in redocly.yaml, and any
// other ambiguous pair still warns.

/** A path's segments, and which of them are templates (`{id}`). */
const parse = (path) => {
  const segments = path.split('/')
  return { path, segments, templated: segments.map((segment) => /^{.+?}$/.test(segment)) }
}

/** Redocly's reading: two paths of as many segments are ambiguous when every pair of literal segments agrees. */
const ambiguous = (a, b) =>
  a.segments.length === b.segments.length &&
  a.templated.filter(Boolean).length === b.templated.filter(Boolean).length &&
  a.segments.every((segment, i) => a.templated[i] || b.templated[i] || segment === b.segments[i])

function NoAmbiguousPaths(options) {
  const allowed = new Set((options.allowed ?? []).map((pair) => [...pair].sort().join(' ')))
  return {
    Paths(paths, { report, location }) {
      const seen = []
      for (const path of Object.keys(paths)) {
        const parsed = parse(path)
        for (const other of seen) {
          if (!ambiguous(other, parsed) || allowed.has([other.path, path].sort().join(' '))) continue
          report({
            message: `Paths should resolve unambiguously. Found two ambiguous paths: \`${other.path}\` and \`${path}\`.`,
            location: location.child([path]).key()
          })
        }
        seen.push(parsed)
      }
    }
  }
}

export default function cairnRules() {
  return { id: 'cairn', rules: { oas3: { 'no-ambiguous-paths': NoAmbiguousPaths } } }
}
