/**
 * The seam between runs and org secrets: a run names secrets, its sandbox
 * gets their values as environment variables, and every value is redacted from what the
 * run stores and sends. The secrets group implements it.
 */
import type { NamedValue } from '../../secrets/redact.js'

export interface RunSecrets {
  /**
   * The values of these names in the org, marking them used; names the org lacks (or whose
   * value no configured key opens) come back in `missing`. Throws the `secrets_unavailable`
   * error when this server cannot open secrets at all.
   */
  open(orgId: string, names: string[]): Promise<{ values: NamedValue[]; missing: string[] }>
}
