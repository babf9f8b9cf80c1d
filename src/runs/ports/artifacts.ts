/**
 * The seam between runs and the artifacts group: what a run saves (the echo engine's
 * `artifact: <name>` lines, the `write_artifact` tool). The artifacts group implements it;
 * the runs side stores and streams `artifact.created` for every save.
 */

/** The run a file is saved for. */
export interface ArtifactRunRef {
  orgId: string
  runId: string
  rootRunId: string
}

export interface SavedArtifact {
  artifactId: string
  name: string
  version: number
}

/** An upload a run attaches. */
export interface AttachedUpload {
  id: string
  name: string
  contentType: string
  size: number
}

export interface RunArtifacts {
  /** Saves text as the run's artifact `name` (a new version when the run saved that name before). */
  save(run: ArtifactRunRef, file: { name: string; content: string; contentType: string }): Promise<SavedArtifact>
  /** The org's uploads among these ids (one query; another org's are not among them), in the order asked. */
  uploadsOf(orgId: string, ids: string[]): Promise<AttachedUpload[]>
  /** An upload's bytes; null when it is gone. */
  readUpload(orgId: string, id: string): Promise<Buffer | null>
}
