import { and, asc, eq } from 'drizzle-orm'
import type { FastifyInstance } from 'fastify'
import { runEvents } from '../../src/runs/tables.js'
import { eventually } from './sse-client.js'

/** The run once it has finished (succeeded, failed or cancelled), read through the API with
 * ?wait= (woken by the run's end, not polled; a run waiting for a person answers at once). */
export const finishedRun = (app: FastifyInstance, cookie: string, id: string) =>
  eventually(async () => {
    const run = (await app.inject({ method: 'GET', url: `/api/runs/${id}?wait=30`, headers: { cookie } })).json().run
    return ['succeeded', 'failed', 'cancelled'].includes(run.status) ? run : null
  }, 90_000)

/** A run's stored events, oldest first. */
export const storedEventsOf = async (app: FastifyInstance, orgId: string, runId: string) =>
  (
    await app.db
      .select()
      .from(runEvents)
      .where(and(eq(runEvents.orgId, orgId), eq(runEvents.runId, runId)))
      .orderBy(asc(runEvents.id))
  ).map((e) => ({ type: e.type, data: e.data as Record<string, any> }))
