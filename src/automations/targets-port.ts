/**
 * What an automation fire or trigger needs of the skills group: the run a skill or
 * playbook target starts, read in the transaction that stores the run. The skills group
 * implements it (`app.skills.forAutomations`).
 */
import type { Db, Tx } from '../db/client.js'
import type { RunSettings } from '../runs/tables.js'

export interface PreparedRun {
  prompt: string
  /** the run's system instructions and settings (a skill's) */
  instructions?: string | null | undefined
  settings?: RunSettings | undefined
  /** upload ids copied into the run's workspace (a prompt target's) */
  attachments?: string[] | undefined
  metadata: Record<string, unknown>
  /** work that commits with the run (a playbook's run row) */
  started?(tx: Tx, run: { id: string; orgId: string; engine: string; model: string | null }): Promise<void>
}

export interface AutomationTargets {
  /** a skill run of this skill, or null when the org has no such skill */
  skill(tx: Tx, orgId: string, skillId: string, input: string | undefined): Promise<PreparedRun | null>
  /** a playbook's first step, or null when the org has no such playbook */
  playbook(tx: Tx, orgId: string, playbookId: string, input: string | undefined): Promise<PreparedRun | null>
  /** whether the org has this skill / playbook (checked when an automation is saved) */
  exists(db: Db | Tx, orgId: string, target: { skillId: string } | { playbookId: string }): Promise<boolean>
}
