import t from 'tap'
import { ConfigError, loadConfig } from '../../src/config.js'

t.test('memory configuration: defaults, and an http backend needs its url', async (t) => {
  const config = loadConfig({ NODE_ENV: 'test' })
  t.equal(config.MEMORY_BACKEND, 'postgres')
  t.equal(config.MEMORY_CAPTURE_ATTEMPTS, 8)
  t.equal(config.MEMORY_CAPTURE_WORKER, true)
  t.throws(() => loadConfig({ MEMORY_BACKEND: 'http' }), ConfigError)
  t.throws(() => loadConfig({ MEMORY_BACKEND: 'redis' }), ConfigError)
  t.throws(() => loadConfig({ MEMORY_URL: 'ftp://x' }), ConfigError)
  t.throws(() => loadConfig({ MEMORY_CAPTURE_ATTEMPTS: '0' }), ConfigError)
  const http = loadConfig({ MEMORY_BACKEND: 'http', MEMORY_URL: 'http://mem0:8000', MEMORY_CAPTURE_WORKER: 'false' })
  t.equal(http.MEMORY_URL, 'http://mem0:8000')
  t.equal(http.MEMORY_CAPTURE_WORKER, false)
})
