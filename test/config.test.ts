import t from 'tap'
import { existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { isAbsolute } from 'node:path'
import { ConfigError, filesDir, loadConfig } from '../src/config.js'

t.test('defaults describe a local development build', async (t) => {
  const config = loadConfig({})
  t.equal(config.PORT, 3000)
  t.equal(config.HOST, '0.0.0.0')
  t.equal(config.DATA_DIR, './data')
  t.equal(config.DATABASE_URL, undefined)
  t.equal(config.ALLOW_DEV_ORG, true)
  t.equal(config.release, 'run-events-v1:dev')
  t.equal(config.isDevBuild, true)
  t.same(config.CORS_ORIGINS, [])
  t.equal(config.TRUST_PROXY, false)
})

t.test('values are converted from strings', async (t) => {
  const config = loadConfig({
    PORT: '8080',
    ALLOW_DEV_ORG: 'false',
    SERVICE_COMMIT: 'abc123',
    CORS_ORIGINS: 'https://app.example.com, http://localhost:5173',
    TRUST_PROXY: '2',
    DATABASE_URL: 'postgres://u@h:5432/db'
  })
  t.equal(config.PORT, 8080)
  t.equal(config.ALLOW_DEV_ORG, false)
  t.equal(config.release, 'run-events-v1:abc123')
  t.equal(config.isDevBuild, false)
  t.same(config.CORS_ORIGINS, ['https://app.example.com', 'http://localhost:5173'])
  t.equal(config.TRUST_PROXY, 2)
  t.same(loadConfig({ TRUST_PROXY: '10.0.0.0/8,127.0.0.1' }).TRUST_PROXY, ['10.0.0.0/8', '127.0.0.1'])
  t.equal(loadConfig({ TRUST_PROXY: 'true' }).TRUST_PROXY, true)
})

t.test('dev-org access is off by default in production, and can be forced', async (t) => {
  t.equal(loadConfig({ NODE_ENV: 'production' }).ALLOW_DEV_ORG, false)
  t.equal(loadConfig({ NODE_ENV: 'production', ALLOW_DEV_ORG: 'true' }).ALLOW_DEV_ORG, true)
})

t.test('a commit ending in a dev tag is a development build', async (t) => {
  t.equal(loadConfig({ SERVICE_COMMIT: '1.2.0-dev' }).isDevBuild, true)
  t.equal(loadConfig({ SERVICE_COMMIT: 'devops1' }).isDevBuild, false)
})

t.test('empty values count as unset', async (t) => {
  t.equal(loadConfig({ PORT: '', DATABASE_URL: ' ' }).PORT, 3000)
  t.equal(loadConfig({ DATABASE_URL: '' }).DATABASE_URL, undefined)
})

t.test('a bad value is refused with the variable named', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ PORT: 'abc' }, /PORT="abc"/],
    [{ PORT: '70000' }, /PORT/],
    [{ ALLOW_DEV_ORG: 'maybe' }, /ALLOW_DEV_ORG="maybe"/],
    [{ LOG_LEVEL: 'loud' }, /LOG_LEVEL/],
    [{ NODE_ENV: 'staging' }, /NODE_ENV/],
    [{ DATABASE_URL: 'mysql://x' }, /DATABASE_URL/],
    [{ SERVICE_COMMIT: 'has space' }, /SERVICE_COMMIT/],
    [{ CORS_ORIGINS: 'not a url' }, /CORS_ORIGINS/],
    [{ CORS_ORIGINS: 'https://app.example.com/path' }, /CORS_ORIGINS.*https:\/\/app\.example\.com/],
    [{ PUBLIC_URL: 'cairn.example.com' }, /PUBLIC_URL/],
    [{ PUBLIC_URL: 'https://' }, /PUBLIC_URL: must be an absolute http\(s\) URL/]
  ]
  for (const [env, pattern] of cases) {
    t.throws(() => loadConfig(env), { name: 'ConfigError', message: pattern }, JSON.stringify(env))
  }
  t.ok(new ConfigError('x') instanceof Error)
})

t.test(
  'an in-memory database keeps its files in a temporary directory of its own, never in a folder named memory:',
  async (t) => {
    const dir = filesDir(loadConfig({ DATA_DIR: 'memory://' }))
    t.equal(filesDir(loadConfig({ DATA_DIR: 'memory://' })), dir, 'the same directory for the life of the process')
    t.ok(isAbsolute(dir) && dir.startsWith(tmpdir()), dir)
    t.ok(existsSync(dir))
    t.notOk(dir.includes('memory:'))
    t.equal(filesDir(loadConfig({ DATA_DIR: './data' })), './data', 'a real DATA_DIR is used as it is')
    t.notOk(existsSync('memory:'), 'nothing was made in the working directory')
  }
)
