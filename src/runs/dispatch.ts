import { sql, type SQL } from 'drizzle-orm'
import type { FastifyBaseLogger } from 'fastify'
import type { Static } from 'typebox'
import { engineUnavailable, notFound, rateLimited, validationFailed } from '../../plugins/errors.js'
import { Redactor } from '../secrets/redact.js'
import type { RunSecrets } from './ports/secrets.js'
import type { IdempotencyLock, StoredAnswer } from '../../plugins/idempotency/index.js'
import type { CreateRunBody } from '../../schemas/runs.js'
import type { Principal } from '../auth/principal.js'
import { rowsOf, type Db, type Tx } from '../db/client.js'
import { boolOf } from '../db/rows.js'
import { newId } from '../db/ids.js'
import type { Engine } from './engines/types.js'
import type { EngineRegistry } from './engines/registry.js'
import type { EventBatcher } from './events.js'
import {
  announceCommitted,
  createRun,
  insertThreadRoot,
  originOf,
  runToWire,
  type OnRunsEnded,
  type RunRow
} from './runs-repo.js'
import type { RunOrigin } from './tables.js'
import { agentOptionsOf } from './agent-options.js'
import { currentTraceparent } from '../telemetry/tracing.js'
import type { RunArtifacts } from './ports/artifacts.js'

export interface DispatchDeps {
  db: Db
  /** the org's uploads a run attaches (the artifacts group) */
  artifacts: Pick<RunArtifacts, 'uploadsOf'>
  engines: EngineRegistry
  events: EventBatcher
  secrets: RunSecrets
  /** told of the runs an `interrupt` ends (their remembered facts are captured) */
  onEnded?: OnRunsEnded | undefined
  /** an org with this many queued runs is refused another (429 with Retry-After); 0: no limit */
  queueMax: number
  /** the index of the first of these tool names no MCP server of the org offers, or -1 (the mcp group) */
  mcpTools?: ((orgId: string, names: string[]) => Promise<number>) | undefined
}

export interface DispatchInput {
  principal: Principal
  body: Static<typeof CreateRunBody>
  /** the request's Idempotency-Key lock, when it carries one */
  idempotency: IdempotencyLock | null
  log: FastifyBaseLogger
  /** the run's origin when not the caller's (`skill`, `automation`, ...) */
  origin?: RunOrigin | undefined
  /**
   * Work that commits with the run (a playbook's run row, the task a run is started from);
   * the fields it answers join the reply beside `run`.
   */
  attach?: ((tx: Tx, run: RunRow) => Promise<Record<string, unknown>>) | undefined
  /**
   * A condition the run is stored under, checked in the statement that stores it (a skill
   * still at the version its prompt was made from); when it does not hold, nothing is
   * stored and `RunPreconditionFailed` is thrown.
   */
  precondition?: SQL | undefined
}

/** The dispatch's precondition did not hold: nothing was stored. */
export class RunPreconditionFailed extends Error {
  override name = 'RunPreconditionFailed'
}

/** Retry-After for a full queue: long enough for workers to take some, short enough to feel live. */
const QUEUE_RETRY_AFTER_S = 2

/** Whether the org has at least `limit` runs queued: counts no further than the limit, on a partial index. */
export async function queuedAtLeast(db: Db, orgId: string, limit: number): Promise<boolean> {
  const [row] = rowsOf<{ n: unknown }>(
    await db.execute(sql`
    select count(*)::int as n from (select 1 from runs where org_id = ${orgId} and status = 'queued' limit ${limit}) q`)
  )
  return Number(row?.n ?? 0) >= limit
}

/** Whether the org has fewer than `limit` runs queued, as a condition of the statement that stores a run. */
function queueHasRoom(orgId: string, limit: number): SQL {
  return sql`(select count(*) from (select 1 from runs where org_id = ${orgId} and status = 'queued' limit ${limit}) q) < ${limit}`
}

async function holds(db: Db | Tx, condition: SQL): Promise<boolean> {
  return boolOf(rowsOf<{ ok: unknown }>(await db.execute(sql`select (${condition}) as ok`))[0]?.ok)
}

/**
 * `POST /api/runs`: stores the run (and its idempotent answer, in the same commit), then
 * announces it. Returns the answer to send, which a retry with the same key replays.
 */
export async function dispatchRun(
  { db, engines, events, secrets, artifacts, onEnded, mcpTools, queueMax }: DispatchDeps,
  { principal, idempotency, log, attach, precondition, ...input }: DispatchInput
): Promise<StoredAnswer> {
  const full = () =>
    rateLimited(QUEUE_RETRY_AFTER_S, `queued runs in this organization (${queueMax} are waiting to start)`)
  // a new thread's run checks the queue in the statement that stores it (below); others here
  const common = input.body.rootRunId === undefined && attach === undefined
  if (!common && queueMax > 0 && (await queuedAtLeast(db, principal.orgId, queueMax))) throw full()
  const chosen = await engines.resolve(input.body.engine, input.body.model, principal.orgId)
  if ('error' in chosen) throw engineUnavailable(chosen.error)
  const { instructions, settings, attachments } = agentOptionsOf(input.body)
  const named = settings.tools ?? []
  if (named.some((name) => name.startsWith('mcp__'))) {
    // the org's catalogue, its MCP servers' tools included
    const unknown = mcpTools
      ? await mcpTools(principal.orgId, named)
      : named.findIndex((name) => name.startsWith('mcp__'))
    if (unknown >= 0)
      throw validationFailed([
        {
          path: `/body/tools/${unknown}`,
          message: `no MCP server of this organization offers ${JSON.stringify(named[unknown])}`
        }
      ])
  }
  if (attachments.length > 0) {
    // another org's upload is as unknown as one that never was
    const found = new Set((await artifacts.uploadsOf(principal.orgId, attachments)).map((u) => u.id))
    const missing = attachments.find((id) => !found.has(id))
    if (missing !== undefined) throw notFound(`no upload ${JSON.stringify(missing)} in this organization (attachments)`)
  }
  const body = await withSecretsRedacted(secrets, principal.orgId, input.body)
  const origin = input.origin ?? originOf(principal)
  let run: RunRow
  let answer: StoredAnswer
  if (common && body.rootRunId === undefined) {
    // the common case, a new thread: the run and its stored answer in one statement, stored
    // only while the org's queue has room (the count is the statement's, not a round trip of its own)
    const id = newId()
    run = {
      id,
      orgId: principal.orgId,
      rootRunId: id,
      parentRunId: null,
      engine: chosen.engine.id,
      model: chosen.model,
      prompt: body.prompt,
      status: 'queued',
      origin,
      error: null,
      metadata: body.metadata ?? {},
      secretNames: body.secrets ?? [],
      userId: principal.userId,
      createdAt: new Date(),
      startedAt: null,
      finishedAt: null,
      inputTokens: null,
      outputTokens: null,
      contextBytes: null,
      contextShortBytes: null,
      leaseOwner: null,
      leaseExpiresAt: null,
      cancelRequested: false,
      output: null,
      instructions,
      settings,
      attachments,
      suspended: null,
      resumeAt: null,
      remembered: null,
      // the request's span: the run's trace continues it, on whichever instance executes the run
      traceparent: currentTraceparent() ?? null
    }
    const wire = { run: runToWire(run) }
    const room = queueMax > 0 ? queueHasRoom(principal.orgId, queueMax) : undefined
    const when = room && precondition ? sql`(${room}) and (${precondition})` : (room ?? precondition)
    const completion = idempotency?.completion(201, wire, when) ?? null
    if (!(await insertThreadRoot(db, run, completion?.update ?? null, when))) {
      if (room && !(await holds(db, room))) throw full()
      if (precondition && !(await holds(db, precondition))) throw new RunPreconditionFailed()
      // no row: a live row holds the key (a retry or a duplicate); its answer is sent instead
      throw idempotency!.taken()
    }
    idempotency?.markStored()
    answer = completion?.answer ?? { status: 201, payload: JSON.stringify(wire) }
  } else {
    const rootRunId = body.rootRunId
    ;({ run, answer } = await db.transaction(async (tx) => {
      if (precondition && !(await holds(tx, precondition))) throw new RunPreconditionFailed()
      const created = await createRun(tx, principal, {
        prompt: body.prompt,
        engine: chosen.engine.id,
        model: chosen.model,
        rootRunId,
        metadata: body.metadata,
        secretNames: body.secrets,
        origin,
        instructions,
        settings,
        attachments,
        multitask: body.multitask,
        onEnded
      })
      if (!created) throw notFound('no such thread in this organization')
      const wire = { run: runToWire(created), ...(attach ? await attach(tx, created) : {}) }
      const stored = idempotency
        ? await idempotency.complete(tx, 201, wire)
        : { status: 201, payload: JSON.stringify(wire) }
      return { run: created, answer: stored }
    }))
  }
  // the run committed, so the request answers as committed whatever happens next
  await announceCommitted(events, [run], log)
  return answer
}

/**
 * The secrets a run names must exist in the org (else 400), and their values
 * are replaced by `[secret:NAME]` in what is stored of the run (prompt, metadata).
 */
async function withSecretsRedacted(
  secrets: RunSecrets,
  orgId: string,
  body: Static<typeof CreateRunBody>
): Promise<Static<typeof CreateRunBody>> {
  if (!body.secrets || body.secrets.length === 0) return body
  const { values, missing } = await secrets.open(orgId, body.secrets)
  if (missing.length > 0) {
    throw validationFailed(
      missing.map((name) => ({
        path: `/body/secrets/${body.secrets!.indexOf(name)}`,
        message: `no secret named ${name} in this organization`
      }))
    )
  }
  const redactor = new Redactor(values)
  return {
    ...body,
    prompt: redactor.text(body.prompt),
    ...(body.metadata ? { metadata: redactor.deep(body.metadata) } : {})
  }
}

/**
 * The engine and model `POST /api/chat` uses: the one the model names (an org provider's
 * included), else the org's default model.
 */
export async function chatEngine(
  engines: EngineRegistry,
  orgId: string,
  model: string | undefined
): Promise<{ engine: Engine; model: string | null }> {
  const chosen = await engines.resolve(undefined, model, orgId)
  if ('error' in chosen) throw engineUnavailable(chosen.error)
  return chosen
}
