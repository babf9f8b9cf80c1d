import { randomUUID } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { WebSocket } from 'ws'
import { filesDir, type Config } from '../config.js'
import { ToolGateway } from './gateway.js'
import { sandboxUnavailable as sandboxUnavailableError, type ApiError } from '../../plugins/errors.js'
import type { BubblewrapProbe, SandboxUser } from './bubblewrap.js'
import { LocalSandboxProvider, SandboxUnavailableError } from './local-sandbox.js'
import type {
  ArtifactWriter,
  KnowledgeTools,
  McpToolSource,
  MemoryTools,
  RunDirectory,
  RunEventWriter,
  SkillTools,
  WorkspaceArchives
} from './ports.js'
import { SandboxManager, type SandboxProvider } from './sandbox.js'
import { ThreadWorkspaces } from './workspaces.js'

/** What the runtime needs from the runs group (src/runs/ports/runtime.ts). */
export interface RuntimePorts {
  runs: RunDirectory
  events: RunEventWriter
  memory: MemoryTools
  artifacts: ArtifactWriter
  knowledge: KnowledgeTools
  skills: SkillTools
}

/** What tests may replace: any port, the sandbox provider, the bubblewrap probe. */
export interface RuntimeWiring extends Partial<RuntimePorts> {
  /** replaces the provider SANDBOX_PROVIDER would choose */
  sandboxProvider?: SandboxProvider
  /** replaces the local provider's bubblewrap probe (tests force "bwrap missing") */
  bubblewrapProbe?: (user: SandboxUser | null) => BubblewrapProbe
}

/** Whether tools, terminals and desktops have somewhere to run, as `GET /api/config` reports it. */
export interface SandboxStatus {
  /** the provider that runs them, or `none` */
  provider: string
  available: boolean
  /** how commands are confined (`bwrap`; `none` only with SANDBOX_UNCONFINED=true); null without a provider */
  confinement: string | null
  /** why there is no sandbox (names bubblewrap when that is why); null when available */
  reason: string | null
}

export interface Runtime {
  /** null when there is no sandbox (SANDBOX_PROVIDER=none, or no bubblewrap without SANDBOX_UNCONFINED) */
  sandboxes: SandboxManager | null
  sandboxStatus: SandboxStatus
  gateway: ToolGateway
  runs: RunDirectory
  sockets: OpenSockets
  /**
   * thread workspaces that follow their thread across instances; null without a sandbox (or with a provider that keeps
   * its own)
   */
  workspaces: ThreadWorkspaces | null
}

export interface SocketOwner {
  orgId: string
  userId: string | null
  sessionId?: string | undefined
}

/**
 * The terminal and desktop sockets open on this instance, with who opened them, so
 * sign-out or a removed membership can close them at once (1008).
 */
export class OpenSockets {
  private readonly open = new Map<WebSocket, SocketOwner>()

  add(socket: WebSocket, owner: SocketOwner): void {
    this.open.set(socket, owner)
    socket.once('close', () => this.open.delete(socket))
  }

  /** Closes every socket whose owner matches all the given fields; returns how many. */
  close(match: Partial<SocketOwner>, reason = 'access revoked'): number {
    let closed = 0
    for (const [socket, owner] of this.open) {
      const hit = (Object.keys(match) as Array<keyof SocketOwner>).every(
        (k) => match[k] === undefined || owner[k] === match[k]
      )
      if (!hit) continue
      socket.close(1008, reason)
      closed++
    }
    return closed
  }

  get size(): number {
    return this.open.size
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** the sandboxes and the tool gateway; the runs group's engines call `runtime.gateway` */
    runtime: Runtime
  }
}

/** The variables the runtime service reads: a read of another is a type error. */
export type RuntimeConfig = Pick<
  Config,
  | 'DATA_DIR'
  | 'SANDBOX_PROVIDER'
  | 'SANDBOX_CONFINEMENT'
  | 'SANDBOX_UNCONFINED'
  | 'SANDBOX_UID'
  | 'SANDBOX_GID'
  | 'SANDBOX_NETWORK'
  | 'SANDBOX_EXEC_TIMEOUT_MS'
  | 'SANDBOX_OUTPUT_MAX_BYTES'
  | 'SANDBOX_FILE_MAX_BYTES'
  | 'SANDBOX_IDLE_MS'
  | 'SANDBOX_WORKSPACE_LEASE_MS'
  | 'SANDBOX_WORKSPACE_MAX_BYTES'
  | 'TOOL_OUTPUT_MAX_BYTES'
  | 'TOOL_APPROVAL_TIMEOUT_MS'
  | 'BLOB_SWEEP_MS'
>

export interface RuntimeServiceOptions extends RuntimePorts, Omit<RuntimeWiring, keyof RuntimePorts> {
  config: RuntimeConfig
  /** where workspace archives go (the artifacts group's blob store) */
  archives: WorkspaceArchives
  /** the org's MCP servers' tools, offered beside the built-in ones */
  mcp?: McpToolSource | undefined
}

/**
 * Who holds workspace leases from this process. With the embedded database only one
 * process can use the data directory, so the id is kept there: restarted after a crash,
 * the instance is still the holder of its old leases and need not wait for them to expire
 * (it restores what was saved, its copy no longer being known to match). With Postgres,
 * one id per process.
 */
function instanceIdFor(config: Pick<RuntimeConfig, 'DATA_DIR'>, kind: 'postgres' | 'pglite'): string | undefined {
  if (kind !== 'pglite') return undefined
  const path = join(filesDir(config), 'sandbox-state', 'instance-id')
  try {
    return readFileSync(path, 'utf8').trim()
  } catch {
    const id = randomUUID()
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, id)
    return id
  }
}

/** The 503 of routes and tools that need a sandbox when there is none. */
export function sandboxUnavailable(status: SandboxStatus): ApiError {
  return sandboxUnavailableError(status.reason ?? 'no sandbox provider is available')
}

const NO_PROVIDER = 'no sandbox provider is configured (SANDBOX_PROVIDER=none)'

function providerFor(
  config: RuntimeConfig,
  app: FastifyInstance,
  wiring: RuntimeServiceOptions
): { provider: SandboxProvider | null; reason: string | null } {
  if (wiring.sandboxProvider) return { provider: wiring.sandboxProvider, reason: null }
  if (config.SANDBOX_PROVIDER === 'none') return { provider: null, reason: NO_PROVIDER }
  try {
    return {
      provider: new LocalSandboxProvider({
        dataDir: filesDir(config),
        confinement: config.SANDBOX_CONFINEMENT,
        unconfined: config.SANDBOX_UNCONFINED,
        ...(wiring.bubblewrapProbe ? { probe: wiring.bubblewrapProbe } : {}),
        user: { uid: config.SANDBOX_UID, gid: config.SANDBOX_GID },
        network: config.SANDBOX_NETWORK,
        execTimeoutMs: config.SANDBOX_EXEC_TIMEOUT_MS,
        outputMaxBytes: config.SANDBOX_OUTPUT_MAX_BYTES,
        fileMaxBytes: config.SANDBOX_FILE_MAX_BYTES,
        log: app.log
      }),
      reason: null
    }
  } catch (err) {
    if (err instanceof SandboxUnavailableError) return { provider: null, reason: err.message }
    throw err
  }
}

/** Shared runtime services, decorated at the root so the runs group's engines can reach the gateway. */
export default fp(
  async function runtimeService(app: FastifyInstance, opts: RuntimeServiceOptions) {
    const { config, runs } = opts
    const { provider, reason } = providerFor(config, app, opts)
    const sandboxStatus: SandboxStatus = provider
      ? { provider: provider.name, available: true, confinement: provider.confinement, reason: null }
      : { provider: 'none', available: false, confinement: null, reason }
    const sandboxes = provider ? new SandboxManager(provider, { idleMs: config.SANDBOX_IDLE_MS }) : null
    const workspaces =
      sandboxes && provider?.workspaceRoot
        ? new ThreadWorkspaces({
            db: app.db,
            archives: opts.archives,
            sandboxes,
            root: provider.workspaceRoot,
            stateDir: join(filesDir(config), 'sandbox-state'),
            instanceId: instanceIdFor(config, app.database.kind),
            leaseMs: config.SANDBOX_WORKSPACE_LEASE_MS,
            maxBytes: config.SANDBOX_WORKSPACE_MAX_BYTES,
            runs,
            listen: (channel, fn, onListen) => app.database.listen(channel, fn, onListen),
            log: app.log.child({ component: 'workspaces' })
          })
        : null
    const gateway = new ToolGateway({
      db: app.db,
      sandboxes,
      workspaces,
      sandboxUnavailable: sandboxStatus.reason,
      runs,
      events: opts.events,
      memory: opts.memory,
      artifacts: opts.artifacts,
      knowledge: opts.knowledge,
      skills: opts.skills,
      mcp: opts.mcp,
      outputMaxBytes: config.TOOL_OUTPUT_MAX_BYTES,
      execTimeoutMs: config.SANDBOX_EXEC_TIMEOUT_MS,
      approvalTimeoutMs: config.TOOL_APPROVAL_TIMEOUT_MS,
      log: app.log
    })
    app.decorate('runtime', { sandboxes, sandboxStatus, gateway, runs, sockets: new OpenSockets(), workspaces })
    if (provider)
      app.log.info(
        { provider: provider.name, confinement: provider.confinement, desktop: provider.desktopAvailable },
        'sandbox provider ready'
      )
    app.addHook('onReady', async () => {
      workspaces?.start(config.BLOB_SWEEP_MS)
    })
    // after the run worker handed its runs back (preClose), before the database closes:
    // what changed is saved and the leases freed, so another instance need not wait for them
    app.addHook('onClose', async () => {
      await app.shutdown.close('saving and freeing thread workspaces', async () => {
        await workspaces?.close()
        await sandboxes?.close()
      })
    })
  },
  { name: 'runtime', fastify: '5.x', dependencies: ['db', 'shutdown-refusals'] }
)
