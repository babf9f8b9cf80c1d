import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import fp from 'fastify-plugin'
import type { FastifyRequest } from 'fastify'
import { desktopUnavailable, notFound, workspaceBusy } from '../../plugins/errors.js'
import { principalOf } from '../auth/principal.js'
import { errorResponses } from '../../schemas/common.js'
import {
  ApprovalListQuery,
  ApprovalPage,
  ApprovalParams,
  DecideBody,
  DecideResponse,
  RunParams,
  SetToolPolicyBody,
  SwitchingProtocols,
  ThreadParams,
  ToolPolicy,
  ToolPolicyList,
  ToolPolicyParams
} from '../../schemas/runtime.js'
import { bridgeDesktop } from './desktop-proxy.js'
import { sandboxUnavailable } from './service.js'
import { decideApprovalAs, listApprovalsAs } from './approvals-as.js'
import { bridgeTerminal } from './terminal.js'
import { assertSameOrigin } from './ws-guard.js'
import { WorkspaceBusy, type WorkspaceSession } from './workspaces.js'

/** A terminal admitted but never upgraded (the client went away in between) frees its workspace after this. */
const UNCLAIMED_SESSION_MS = 30_000

export interface RuntimeRoutesOptions {
  corsOrigins: readonly string[]
}

/** Tool policies, approvals, the terminal and the desktop proxy. */
const runtimeRoutes: FastifyPluginAsyncTypebox<RuntimeRoutesOptions> = async (app, opts) => {
  const { gateway, runs, sandboxes, sockets } = app.runtime
  /** the thread a socket was admitted for, found before the upgrade */
  const admitted = new WeakMap<FastifyRequest, string>()
  /** the workspace session a terminal was admitted with, and the timer that ends it if no socket claims it */
  const sessions = new WeakMap<FastifyRequest, { session: WorkspaceSession; timer: NodeJS.Timeout }>()

  // sign-out and removed memberships, made on any instance, close the sockets opened
  // here for them (1008)
  const unsubscribe = app.identity.onChange((change) => {
    if (change.kind === 'session-ended') sockets.close({ sessionId: change.sessionId }, 'signed out')
    else sockets.close({ orgId: change.orgId, userId: change.userId }, 'membership removed')
  })
  app.addHook('onClose', async () => {
    unsubscribe()
  })

  // @fastify/websocket hides WebSocket routes from the API description; ours are part of
  // the product (the streaming endpoints clients use), so they are documented
  app.addHook('onRoute', (route) => {
    if ((route as { websocket?: boolean }).websocket && route.schema) route.schema.hide = false
  })

  /**
   * A terminal or desktop holds the thread's workspace while its socket is open. Another
   * instance holding it (a run or a socket there) refuses the handshake at once with 409:
   * a person is waiting at a screen, where a run would rather wait for it.
   */
  async function admitSession(request: FastifyRequest, key: { orgId: string; threadId: string }): Promise<void> {
    // a plain GET never becomes a socket: it holds nothing
    if (!app.runtime.workspaces || request.headers.upgrade?.toLowerCase() !== 'websocket') return
    let session: WorkspaceSession
    try {
      session = await app.runtime.workspaces.open(key, { wait: false })
    } catch (err) {
      if (err instanceof WorkspaceBusy) throw workspaceBusy()
      throw err
    }
    const timer = setTimeout(() => void session.close().catch(() => {}), UNCLAIMED_SESSION_MS)
    timer.unref()
    sessions.set(request, { session, timer })
  }

  /** The session admitted with the request, now claimed by its socket. */
  function claimSession(request: FastifyRequest): WorkspaceSession | null {
    const held = sessions.get(request)
    if (!held) return null
    clearTimeout(held.timer)
    return held.session
  }

  async function threadOfRun(orgId: string, runId: string): Promise<string> {
    const thread = await runs.threadOfRun(orgId, runId)
    if (!thread) throw notFound('no such run in this organization')
    return thread.rootRunId
  }

  app.get(
    '/tools/policies',
    {
      config: { keyAccess: 'none' },
      schema: {
        operationId: 'listToolPolicies',
        tags: ['runtime'],
        summary: "The org's tool policies (auto or approve), defaults included",
        description:
          "The built-in tools, then the tools the organization's MCP servers listed when last reached (mcp__<server>__<tool>, default approve).",
        response: { 200: ToolPolicyList, ...errorResponses() }
      }
    },
    async (request) => {
      return { items: await gateway.policies(principalOf(request).orgId) }
    }
  )

  app.put(
    '/tools/policies/:tool',
    {
      config: { scope: ['admin', 'session'], keyAccess: 'none' },
      schema: {
        operationId: 'setToolPolicy',
        tags: ['runtime'],
        summary: 'Set whether a tool runs at once or waits for approval',
        description:
          "A built-in tool, or an MCP server's tool as runs see it (mcp__<server>__<tool>, listed by its server when last reached; 404 otherwise).",
        params: ToolPolicyParams,
        body: SetToolPolicyBody,
        response: { 200: ToolPolicy, ...errorResponses(404, 413, 415) }
      }
    },
    async (request) => {
      const principal = principalOf(request)
      const tool = request.params.tool
      await gateway.setPolicy(principal.orgId, tool, request.body.mode, principal.userId)
      const policy = (await gateway.policies(principal.orgId)).find((p) => p.tool === tool)!
      return policy
    }
  )

  app.get(
    '/runs/:id/approvals',
    {
      config: { keyAccess: 'read' },
      schema: {
        operationId: 'listApprovals',
        tags: ['runtime'],
        summary: 'Tool calls of a run that needed approval, oldest first',
        description:
          'Lists the tool calls of a run that waited for a decision, pending and decided, oldest first. An API key of the organization may read them too.',
        params: RunParams,
        querystring: ApprovalListQuery,
        response: { 200: ApprovalPage, ...errorResponses(404) }
      }
    },
    async (request) => {
      return listApprovalsAs(app, principalOf(request), request.params.id, {
        limit: request.query.limit ?? 50,
        cursor: request.query.cursor
      })
    }
  )

  app.post(
    '/runs/:id/approvals/:approvalId',
    {
      config: { keyAccess: 'decide' },
      schema: {
        operationId: 'decideApproval',
        tags: ['runtime'],
        summary: 'Approve or deny a waiting tool call (once)',
        description:
          'Approves or denies a tool call that waits for a decision; the run resumes on any instance once its last pending call is decided. The person who started the run, an organization owner or admin, or an API key of the organization (recorded as decidedBy "key:<key id>") may decide; another member gets 403 forbidden.',
        params: ApprovalParams,
        body: DecideBody,
        response: { 200: DecideResponse, ...errorResponses(403, 404, 413, 415) }
      }
    },
    async (request) => {
      // a tool call runs with the run's access (docs/security.md, "Who may decide a tool call")
      return decideApprovalAs(
        app,
        principalOf(request),
        request.params.id,
        request.params.approvalId,
        request.body.decision
      )
    }
  )

  // WebSockets: every check (principal, Origin, org, availability) runs before the upgrade,
  // so a refused handshake is a plain HTTP error answer, never a 101.
  app.get(
    '/runs/:id/terminal',
    {
      websocket: true,
      config: { scope: 'session', keyAccess: 'none' },
      schema: {
        operationId: 'openTerminal',
        tags: ['runtime'],
        summary:
          'WebSocket: a terminal (PTY) in the run\'s thread sandbox; binary frames are terminal bytes, text frames JSON {type:"resize",cols,rows}',
        params: RunParams,
        response: { 101: SwitchingProtocols, ...errorResponses(404, 409, 503) }
      },
      preHandler: async (request) => {
        assertSameOrigin(request, opts.corsOrigins)
        const { id } = request.params as { id: string }
        const orgId = principalOf(request).orgId
        const thread = await threadOfRun(orgId, id)
        if (!sandboxes) throw sandboxUnavailable(app.runtime.sandboxStatus)
        await admitSession(request, { orgId, threadId: thread })
        admitted.set(request, thread)
      }
    },
    (socket, request) => {
      const threadId = admitted.get(request)!
      const principal = principalOf(request)
      const session = claimSession(request)
      sockets.add(socket, { orgId: principal.orgId, userId: principal.userId, sessionId: principal.sessionId })
      return bridgeTerminal(socket, sandboxes!, { orgId: principalOf(request).orgId, threadId }, request.log, session)
    }
  )

  app.get(
    '/desktop-proxy/:threadId/websockify',
    {
      websocket: true,
      config: { scope: 'session', keyAccess: 'none' },
      schema: {
        operationId: 'openDesktop',
        tags: ['runtime'],
        summary: "WebSocket (subprotocol binary): websockify bridge to the thread sandbox's VNC server, for noVNC",
        params: ThreadParams,
        response: { 101: SwitchingProtocols, ...errorResponses(404, 409, 503) }
      },
      preHandler: async (request) => {
        assertSameOrigin(request, opts.corsOrigins)
        const { threadId } = request.params as { threadId: string }
        if (!(await runs.threadExists(principalOf(request).orgId, threadId)))
          throw notFound('no such thread in this organization')
        if (!sandboxes) throw sandboxUnavailable(app.runtime.sandboxStatus)
        if (!sandboxes.provider.desktopAvailable) {
          throw desktopUnavailable()
        }
        await admitSession(request, { orgId: principalOf(request).orgId, threadId })
        admitted.set(request, threadId)
      }
    },
    (socket, request) => {
      const threadId = admitted.get(request)!
      const principal = principalOf(request)
      const session = claimSession(request)
      // the desktop's programs run until the workspace is saved (its last session's end stops them)
      if (session)
        socket.once(
          'close',
          () =>
            void session
              .close()
              .catch((err: unknown) => request.log.warn({ err }, 'desktop: ending the workspace session failed'))
        )
      sockets.add(socket, { orgId: principal.orgId, userId: principal.userId, sessionId: principal.sessionId })
      return bridgeDesktop(socket, sandboxes!, { orgId: principalOf(request).orgId, threadId }, request.log)
    }
  )
}

// started only where the services it uses are (it reads app.runtime as it registers): a group
// app without them fails at boot, naming what is missing
export default fp(runtimeRoutes, {
  name: 'runtime-routes',
  fastify: '5.x',
  dependencies: ['db', 'principal', 'runtime', '@fastify/websocket'],
  encapsulate: true
})
