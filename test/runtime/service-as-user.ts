import { LocalSandboxProvider } from '../../src/runtime/local-sandbox.js'
import type { Sandbox } from '../../src/runtime/sandbox.js'

// The local sandbox provider in a process of its own, for tests that run the sandbox as a
// service running as an unprivileged user would (bubblewrap in a user namespace), while
// the test itself runs as root. Started by a test of ./desktop.test.ts (`providerAsNobody`);
// it answers the test's requests on the IPC channel, one sandbox at a time.

type Request = { id: number } & (
  | { op: 'create'; orgId: string; threadId: string }
  | { op: 'exec'; command: string; timeoutMs?: number }
  | { op: 'desktop' }
  | { op: 'destroy' }
)

const send = (message: object) => process.send!(message)

let provider: LocalSandboxProvider
try {
  provider = new LocalSandboxProvider({
    dataDir: process.env.DATA_DIR!,
    confinement: 'bwrap',
    unconfined: false,
    network: false,
    execTimeoutMs: 60_000,
    outputMaxBytes: 1 << 20,
    fileMaxBytes: 1 << 20,
    log: { warn: () => {}, info: () => {} }
  })
} catch (err) {
  send({ ready: false, error: (err as Error).message })
  process.exit(0)
}
let sandbox: Sandbox | null = null

process.on('message', (request: Request) => {
  const answer = async () => {
    switch (request.op) {
      case 'create':
        sandbox = await provider.create({ orgId: request.orgId, threadId: request.threadId })
        return null
      case 'exec':
        return sandbox!.exec(request.command, request.timeoutMs ? { timeoutMs: request.timeoutMs } : {})
      case 'desktop':
        return sandbox!.desktop()
      case 'destroy':
        await sandbox?.destroy()
        sandbox = null
        return null
    }
  }
  answer().then(
    (result) => send({ id: request.id, result }),
    (err: Error) => send({ id: request.id, error: err.message })
  )
})
// the test's end (or its death) closes the channel: everything the sandbox started goes with it
process.on('disconnect', () => {
  void (sandbox?.destroy() ?? Promise.resolve()).finally(() => process.exit(0))
})
send({ ready: true, pid: process.pid, uid: process.geteuid!(), confinement: provider.confinement, user: provider.user })
