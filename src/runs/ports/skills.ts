/**
 * The seam between runs and the skills and tasks groups: what a run proposes (the echo
 * engine's ```skill blocks, the `propose_skill` tool) and what follows a finished run (the
 * next step of a playbook, a task moving to done). Those groups implement it.
 */
import type { Tx } from '../../db/client.js'
import type { RunOrigin, RunSettings } from '../tables.js'

/** The run a skill is proposed by. */
export interface SkillRunRef {
  orgId: string
  runId: string
  rootRunId: string
}

/** An open proposal, or why none was made (invalid file, content rejected before). */
export type ProposedSkill = { proposalId: string; state: 'open' } | { refused: string }

export interface RunSkills {
  /** A SKILL.md in the org's learning lane, for a new skill or (with `skillId`) a change of one. */
  propose(run: SkillRunRef, proposal: { skillMd: string; skillId?: string | undefined }): Promise<ProposedSkill>
}

/** A run as it finished, in the transaction that finished it. */
export interface FinishedRun {
  id: string
  orgId: string
  rootRunId: string
  userId: string | null
  status: 'succeeded' | 'failed' | 'cancelled'
  metadata: Record<string, unknown>
}

/** A run to start because another finished (inserted in the same transaction, announced after it). */
export interface FollowUpRun {
  id: string
  orgId: string
  rootRunId: string
  parentRunId: string
  prompt: string
  engine: string
  model: string | null
  origin: RunOrigin
  metadata: Record<string, unknown>
  userId: string | null
  instructions?: string | null | undefined
  settings?: RunSettings | undefined
}

export interface RunFollowUps {
  /**
   * Called in the transaction that finishes a run, so what it writes commits with the run's
   * end or not at all (exactly once, whichever instance finished it). Cheap for runs that
   * concern it not: it looks at `metadata` before it queries.
   */
  afterFinish(tx: Tx, run: FinishedRun): Promise<FollowUpRun[]>
  /**
   * Whether `afterFinish` may have anything to do for this run, from the run alone (no
   * query). A run that concerns no follow-up ends in one statement instead of a
   * transaction; absent, every run concerns it.
   */
  concerns?(run: FinishedRun): boolean
}
