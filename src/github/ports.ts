/**
 * What the github group needs of the knowledge and skills groups, as they implement it:
 * wiki pages are knowledge records, an imported SKILL.md is a skill.
 * The github group never touches their tables itself.
 */
import type { Db, Tx } from '../db/client.js'
import type { SkillProblem } from '../skills/skill-md.js'
import type { SkillRow } from '../skills/skills-repo.js'

/** A knowledge record's `source` when a repo wiki wrote it. */
export interface WikiSource {
  kind: 'wiki'
  repo: string
  commit: string
  path: string
  citedFiles: string[]
}

export interface WikiPageText {
  title: string
  body: string
  tags: string[]
  source: WikiSource
}

/** Knowledge records as wiki pages, each write in the caller's transaction. */
export interface WikiRecords {
  /** a new record (version 1); its id */
  create(tx: Tx, orgId: string, page: WikiPageText, createdBy: string | null): Promise<string>
  /** the record's next version with this text and source; false when the org no longer has it */
  revise(tx: Tx, orgId: string, recordId: string, page: WikiPageText, changedBy: string | null): Promise<boolean>
  /** deletes it (its history keeps a `deleted` entry); false when it was not there */
  remove(tx: Tx, orgId: string, recordId: string, changedBy: string | null): Promise<boolean>
  /** whether the org still has it (a person may have deleted a page) */
  exists(db: Db | Tx, orgId: string, recordId: string): Promise<boolean>
}

/** Where an imported skill came from (a skill's `source`). */
export interface GitHubSkillSource {
  kind: 'github'
  repo: string
  path: string
  ref: string
  commit: string
}

export type SkillImport =
  | { outcome: 'created' | 'updated' | 'unchanged'; skill: SkillRow }
  /** the file is not a valid SKILL.md: every problem, with its line and column */
  | { outcome: 'invalid'; problems: SkillProblem[] }
  /** the name is another skill's, one not imported from this folder of this repository */
  | { outcome: 'name_taken'; name: string }

export interface SkillImports {
  /**
   * A SKILL.md from a repository folder: a new skill, the next version of the skill
   * imported from that folder before (when the commit differs), or nothing new when it was
   * imported at this commit already.
   */
  importSkill(orgId: string, skillMd: string, source: GitHubSkillSource, createdBy: string | null): Promise<SkillImport>
}
