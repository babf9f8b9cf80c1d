/**
 * The seam between runs and a group whose runs do a job of their own (a repository wiki
 * build): the worker claims, leases, streams and finishes such a run like any other, but
 * asks the job, not the engine, to carry it out. The job gets the run's engine to write
 * with (the `echo` engine: deterministic text; a model: written by it). The group that
 * starts such runs implements it.
 */
import type { Engine, EngineContext, EngineResult } from '../engines/types.js'

/** The run a job is looked up for. */
export interface JobRunRef {
  id: string
  orgId: string
  rootRunId: string
  /** the run's real signed-in user (origin `web`), else null: who the job's writes are by */
  realUserId: string | null
  model: string | null
  metadata: Record<string, unknown>
}

export interface RunJob {
  /**
   * Does the run's work: emits its events through `ctx`, honours `ctx.signal`, and answers
   * like an engine. An `EngineError` fails the run with its message.
   */
  run(ctx: EngineContext, engine: Engine): Promise<EngineResult>
}

export interface RunJobs {
  /**
   * The job of this run, or null for a plain run (its engine answers its prompt). Cheap for
   * runs that concern it not: it looks at `metadata` before it queries.
   */
  jobOf(run: JobRunRef): Promise<RunJob | null>
}
