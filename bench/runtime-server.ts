// The real service with a stand-in run directory (every id is a run of the dev org, its
// own thread), so the runtime's run-scoped routes can be loaded before the runs group exists.
import { buildApp } from '../src/app.js'
import { DEV_ORG } from '../src/auth/dev-org.js'
import { loadConfig } from '../src/config.js'

const app = await buildApp({
  config: loadConfig(),
  ports: {
    runtime: {
      runs: {
        async threadOfRun(orgId, runId) {
          return orgId === DEV_ORG.id ? { rootRunId: runId, userId: null } : null
        },
        async threadExists(orgId) {
          return orgId === DEV_ORG.id
        },
        async existingThreads(keys) {
          return new Set(keys.filter((k) => k.orgId === DEV_ORG.id).map((k) => `${k.orgId}/${k.threadId}`))
        },
        async hold() {},
        async decided() {}
      }
    }
  }
})
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening on ${address}\n`)
process.on('SIGTERM', () => {
  void app.close().then(() => process.exit(0))
})
