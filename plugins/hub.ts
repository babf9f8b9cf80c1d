import { existsSync } from 'node:fs'
import { readFile, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import fastifyStatic from '@fastify/static'
import type { FastifyInstance, FastifyReply } from 'fastify'
import fp from 'fastify-plugin'

export interface HubOptions {
  /** the server's release, written into the page for `x-service-client-release` */
  release: string
  /** the built console (scripts/build-hub.mjs); default: .build/hub of the checkout */
  dir?: string
}

/**
 * The console's policy: its own scripts and styles only (no inline script or style, no
 * eval), its own API, no frames, no plugins, no forms to elsewhere. A stored memory is
 * rendered as text; this is the second line if that ever failed.
 */
export const HUB_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "object-src 'none'"
].join('; ')

/** The checkout (or image) root: the nearest directory above this file with a package.json. */
function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir)
    if (parent === dir) return process.cwd()
    dir = parent
  }
  return dir
}

/** What esbuild names the bundle's files (scripts/build-hub.mjs): no path, no dot files. */
const ASSET_NAME = /^[\w-]+\.(js|css|map)$/

export const defaultHubDir = () => join(projectRoot(), '.build', 'hub')

const escapeAttribute = (value: string) =>
  value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

/**
 * The Memory Hub console at /hub/, a single-page app over the public API.
 * The page (index.html, every client-side route) is read at each request through the
 * build's symlink, so a rebuild is served without a restart, and carries the release of
 * this server. Assets have content-hashed names: cached for a year. Kept out of the
 * OpenAPI document (it is no API operation).
 */
export default fp(
  async function hubPlugin(app: FastifyInstance, opts: HubOptions) {
    const dir = opts.dir ?? defaultHubDir()
    const release = escapeAttribute(opts.release)

    const page = async (reply: FastifyReply) => {
      let html: string
      try {
        html = await readFile(join(dir, 'index.html'), 'utf8')
      } catch {
        return reply
          .code(503)
          .type('text/plain; charset=utf-8')
          .header('cache-control', 'no-store')
          .send('The Memory Hub console is not built: run `npm run build` (npm ci and npm start build it).\n')
      }
      return reply
        .header('content-security-policy', HUB_CSP)
        .header('cache-control', 'no-cache')
        .type('text/html; charset=utf-8')
        .send(html.replace('%CAIRN_RELEASE%', release))
    }

    // the files under assets/ are sent from disk (ranges, ETags, HEAD) through the link,
    // resolved at each request; a name that is not there is a plain 404, never the page
    const assets = join(dir, 'assets')
    // in a scope of its own, so reply.sendFile is no decorator of the whole app
    await app.register(async function hubAssets(scope) {
      await scope.register(fastifyStatic, { root: assets, serve: false, decorateReply: true, index: false })
      scope.get<{ Params: { file: string } }>(
        '/hub/assets/:file',
        { schema: { hide: true } },
        async (request, reply) => {
          const { file } = request.params
          const found =
            ASSET_NAME.test(file) &&
            (await stat(join(assets, file)).then(
              (s) => s.isFile(),
              () => false
            ))
          if (!found) return reply.code(404).type('text/plain; charset=utf-8').send('Not found\n')
          return reply
            .header('cache-control', 'public, max-age=31536000, immutable')
            .sendFile(file, assets, { cacheControl: false })
        }
      )
    })
    // the root says where to go: the console (whose footer points at the API reference)
    app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/hub/', 302))
    app.get('/hub', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/hub/', 301))
    app.get('/hub/', { schema: { hide: true } }, async (_request, reply) => page(reply))
    // client-side routes (/hub/search, /hub/items/:id, …) load the same page
    app.get('/hub/*', { schema: { hide: true } }, async (_request, reply) => page(reply))
  },
  { name: 'hub', fastify: '5.x' }
)
