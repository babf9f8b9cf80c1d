import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { Tx } from '../../db/client.js'
import { chatEngine } from '../dispatch.js'
import type { EngineRegistry } from '../engines/registry.js'
import type { EventBatcher } from '../events.js'
import { announceCommitted, createRun, type RunRow } from '../runs-repo.js'

/** A run a chat message starts, as the chat platform asks for it. */
export interface ChatPlatformRun {
  id: string
  orgId: string
  prompt: string
  engine: string
  model: string | null
  metadata: Record<string, unknown>
}

/** What the Slack ingress needs of the runs group. */
export interface ChatPlatformRuns {
  /** the engine and model a chat message's run gets */
  engine(orgId: string): Promise<{ engine: string; model: string | null }>
  /**
   * a queued run in the caller's transaction: a new thread (`rootRunId: null`), or the next run of one; null when that
   * thread is not the org's
   */
  insert(tx: Tx, run: ChatPlatformRun & { rootRunId: string | null }): Promise<RunRow | null>
  /**
   * The INSERT of a queued run that starts its own thread, for a WITH chain: one row per row
   * of `gate` (a CTE named by the caller), `returning id`
   */
  rootInsert(run: ChatPlatformRun, gate: SQL): SQL
  /** the run.queued events after the commit; never throws */
  announce(runs: Array<Pick<RunRow, 'id' | 'orgId' | 'rootRunId' | 'engine' | 'model'>>): Promise<void>
}

/**
 * The runs group's side of the chat-platform port: the engine a chat message gets (as
 * `POST /api/chat` picks it: a ready model, else echo), queued runs with origin
 * `chatplatform` in the caller's transaction (a new thread, or the next run of one), and
 * their announcement after it commits.
 */
export function forChatPlatforms(
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
