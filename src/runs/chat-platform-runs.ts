import type { FastifyBaseLogger } from 'fastify'
import type { ChatPlatformRuns } from '../slack/ingress.js'
import { chatEngine } from './dispatch.js'
import type { EngineRegistry } from './engines/registry.js'
import type { EventBatcher } from './events.js'
import { announceCommitted, createRun } from './runs-repo.js'

/**
 * The runs group's side of the chat-platform port: the engine a chat message gets (as
 * `POST /api/chat` picks it: a ready model, else echo), queued runs with origin
 * `chatplatform` in the caller's transaction (a new thread, or the next run of one), and
 * their announcement after it commits.
 */
export function chatPlatformRuns(runs: { engines: EngineRegistry; events: EventBatcher }, log: FastifyBaseLogger): ChatPlatformRuns {
  return {
    async engine() {
      const chosen = await chatEngine(runs.engines, undefined)
      return { engine: chosen.engine.id, model: chosen.model }
    },
    insert: (tx, run) => createRun(tx, { orgId: run.orgId, userId: null }, {
      id: run.id,
      prompt: run.prompt,
      engine: run.engine,
      model: run.model,
      rootRunId: run.rootRunId ?? undefined,
      metadata: run.metadata,
      origin: 'chatplatform'
    }),
    announce: (rows) => announceCommitted(runs.events, rows, log)
  }
}
