import { sql } from 'drizzle-orm'
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
export function chatPlatformRuns(
  runs: { engines: EngineRegistry; events: EventBatcher },
  log: FastifyBaseLogger
): ChatPlatformRuns {
  return {
    async engine(orgId) {
      const chosen = await chatEngine(runs.engines, orgId, undefined)
      return { engine: chosen.engine.id, model: chosen.model }
    },
    insert: (tx, run) =>
      createRun(
        tx,
        { orgId: run.orgId, userId: null },
        {
          id: run.id,
          prompt: run.prompt,
          engine: run.engine,
          model: run.model,
          rootRunId: run.rootRunId ?? undefined,
          metadata: run.metadata,
          origin: 'chatplatform'
        }
      ),
    rootInsert(run, gate) {
      return sql`insert into runs (id, org_id, root_run_id, parent_run_id, engine, model, prompt, status, origin, metadata, secret_names, user_id)
        select ${run.id}, ${run.orgId}, ${run.id}, null, ${run.engine}, ${run.model}, ${run.prompt}, 'queued', 'chatplatform',
          ${JSON.stringify(run.metadata)}::jsonb, '[]'::jsonb, null
        from ${gate}
        returning id`
    },
    announce: (rows) => announceCommitted(runs.events, rows, log)
  }
}
